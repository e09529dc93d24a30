"""Fake mode: a training step run on tensors that carry shapes, dtypes and devices but no memory (torch's
``FakeTensorMode``), its live bytes counted by the CPU meter exactly as it counts real storages.

A fake tensor has a storage object like a real one (on the ``meta`` device, no bytes behind it) with the
real one's size, shared by its views and freed when the last of them dies; ``StorageMeter`` counts it
through the same ``__torch_dispatch__`` (the fake mode is an infrastructure mode: user modes such as the
meter always see an op before it does). So a step counts the same bytes fake as real, to the byte, at any
size: a 7B model's step runs on a laptop with nothing allocated.

What a fake tensor cannot give is a value. The meter answers two kinds of value read, and refuses the rest:

* a NaN / inf check of a fake tensor (``bool(torch.isnan(loss))``: ``transformers.Trainer``'s NaN filter) is
  answered "finite", which is what a real step of these models reads there;
* after the measured window closed, a read gets a zero: the step's bytes are measured, nothing measured
  depends on it (Trainer reads its loss once training ends);
* any other read (a data-dependent branch, ``.item()``, ``.tolist()`` of a fake tensor) raises
  :class:`ValueRead`, naming the op, the tensor and the code that read it: the cell stops, no number.

Data stays real: ``FakeSession.real()`` leaves fake mode for a block (token ids, a sampler's permutation),
and a real tensor an op meets under fake mode is taken as it is (``allow_non_fake_inputs``), counted as
the real storage it is. An op with no fake kernel fails with torch's own error, which the cell records.
"""
from __future__ import annotations

from .cpu import StorageMeter
from .fake_reads import FAKE, FakeReads, FakeSession, ValueRead, fake_problem  # noqa: F401 - fake mode's names


class FakeStorageMeter(FakeReads, StorageMeter):
    """``StorageMeter`` on fake tensors: the same count, its kind ``cpu-dispatch (fake)``, and the value
    reads answered or refused as the module says (``FakeReads``); after the measured window a read gets a zero."""

    kind = StorageMeter.kind + FAKE

    def _window_closed(self) -> bool:
        return self.end_bytes is not None

    def extra(self):
        out = StorageMeter.extra(self)
        out["fake_reads_answered"] = dict(self.reads)
        return out
