"""Fake mode is exact: every cell of the default job's grid (the Trainer loop and accelerate's own, fp32 / bf16 /
fp16, GA 1 / 2) measured on fake tensors gives the real run's bytes, to the byte: the step's peak, its start and
end, every phase, the allocation sites at each peak and the allocator model's estimates, so every metric.

Tiny widths keep it short (about a minute on two cores); the cells run in this process, with the probe's helpers
on ``sys.path`` as its script puts them (this interpreter's transformers and accelerate, the newest). What may
differ is how many storages the step made in all: transformers 5 takes its mask helpers' traced path when it sees
a fake tensor (``is_tracing``), a few 8x8 temporaries more, never at a peak, which can move where the allocator
model's largest free block lies; with the default job's transformers 4.32 every field is equal, those too
(bench/fake_vs_real.py, docs/performance.md). fp16 runs on CUDA only: on this CPU both sides stop each fp16 cell
with the same reason."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("torch")

PROBES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "probes")
sys.path[:0] = [os.path.join(PROBES, "ga_memory"), PROBES]

from _cells import plan, run_cell  # noqa: E402
from _cli import make_spec, parser  # noqa: E402
from _fit import derive  # noqa: E402

TINY = ["--sizes", "32,64", "--vocab", "64", "--max-positions", "16", "--precisions", "fp32,bf16,fp16", "--ga", "1,2",
        "--device", "cpu"]
# how the run went, not what it measured; the storage counts differ on transformers 5 (module docstring)
NOT_BYTES = ("seconds", "meter", "fake_reads_answered", "storages_seen", "dtype_bytes")


def _bytes(cell: dict) -> dict:
    out = {k: v for k, v in cell.items() if k not in NOT_BYTES}
    if "allocator_model" in out:
        model = {k: v for k, v in out["allocator_model"].items() if k != "events"}
        model["at_peak"] = {k: v for k, v in model["at_peak"].items() if k != "largest_free_block_bytes"}
        out["allocator_model"] = model
    return out


@pytest.mark.parametrize("loop", ["trainer", "accelerate"])
def test_every_cell_of_the_default_grid_measures_the_same_bytes_fake_as_real(loop):
    real_spec = make_spec(parser().parse_args(["--loop", loop, *TINY]))
    fake_spec = make_spec(parser().parse_args(["--loop", loop, "--fake", *TINY]))
    cells = plan(real_spec)
    assert len(cells) == 2 * 3 * 2
    real = [run_cell(real_spec, cell) for cell in cells]
    fake = [run_cell(fake_spec, cell) for cell in cells]
    measured = [c for c in real if "peak_bytes" in c]
    assert len(measured) == 8   # fp32 and bf16 at both widths and GA; fp16 is refused on the CPU, both sides
    assert all(c["meter"] == "cpu-dispatch (fake)" for c in fake if "peak_bytes" in c)
    for r, f in zip(real, fake):
        assert _bytes(f) == _bytes(r), (r["precision"], r["ga"], r["hidden"])
    groups = real_spec["precisions"], real_spec["ga"]
    assert derive(fake, *groups) == derive(real, *groups)
    if loop == "trainer":   # Trainer's NaN filter read the loss at every micro-step: answered "finite"
        assert all(c["fake_reads_answered"]["nan_check"] > 0 for c in fake if "peak_bytes" in c)
