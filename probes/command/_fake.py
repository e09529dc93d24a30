"""The command meter's fake mode (``--fake``): the user's program runs on fake tensors (torch's ``FakeTensorMode``:
shapes, dtypes and devices, no memory), entered when torch is imported, and its step peak is the fake tensors'
live bytes, counted as ``TensorBytes`` counts real ones (sites included). The meter says ``cpu-dispatch (fake)``.

What a fake tensor cannot give is a value: the reads are those of ``_meters.fake_mode.FakeReads`` (a NaN / inf
check is answered "finite": ``transformers.Trainer``'s NaN filter; any other read, ``loss.item()`` or a
data-dependent branch, raises ``ValueRead`` into the program at the line that read it). The first refusal is
recorded (``fake_refused``) and the probe reports it instead of a number (``__main__.py``). Batches stay real:
a ``DataLoader`` fetches and collates outside fake mode (its sampler reads a permutation's values), as the
built-in probe's loaders do; an op meeting real data and fake weights is fake (``allow_non_fake_inputs``).
Only the thread that imported torch runs in fake mode (a mode is per thread); other threads' factories make
real tensors, counted as such.
"""
from ._parts import TensorBytes


class FakeTensorBytes(TensorBytes):
    """``TensorBytes`` on fake tensors: fake mode is entered in the importing thread before the count."""

    def __init__(self, library, fake_library, sites=None):
        TensorBytes.__init__(self, library, sites)
        self._fake = fake_library
        self.session = None

    def _counted(self):
        counted = self._library.SiteBytes
        return type("FakeSiteBytes", (self._fake.FakeReads, counted), {"kind": counted.kind + self._fake.FAKE})

    def start(self, torch):
        problem = self._fake.fake_problem()
        if problem:
            raise RuntimeError(problem)
        self.session = self._fake.FakeSession().__enter__()
        self._real_batches(torch)
        facts = TensorBytes.start(self, torch)
        return {**facts, "fake": True}

    def _real_batches(self, torch):
        """Every ``DataLoader`` (and subclass that iterates through it) fetches its batches outside fake mode."""
        loader = torch.utils.data.DataLoader
        original, real, outside = loader.__iter__, self.session.real, self._fake.iterate_outside

        def __iter__(data_loader):
            return outside(real, lambda: original(data_loader))

        loader.__iter__ = __iter__

    def step_end(self, optimizer, record):
        TensorBytes.step_end(self, optimizer, record)
        self._refusal(record)

    def end(self, record):
        TensorBytes.end(self, record)
        self._refusal(record)
        record["fake_reads_answered"] = dict(self.counter.reads)

    def _refusal(self, record):
        if self.counter.refused:
            record["fake_refused"] = self.counter.refused

    def stop(self):
        TensorBytes.stop(self)
        if self.session is not None:
            try:
                self.session.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - the mode was left by the program, or from another thread
                pass
