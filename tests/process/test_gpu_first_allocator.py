"""acceptance/gpu_first/allocator_model.py (and its cells), the GPU run's allocator-model step, without a
GPU: the CUDA history it reads, turned into the model's trace, and its CPU dry run end to end (DEV=cpu)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEP = os.path.join(ROOT, "acceptance", "gpu_first", "allocator_model.py")


def _step():
    spec = importlib.util.spec_from_file_location("gpu_first_allocator_model", STEP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cuda_history_becomes_the_model_trace():
    """alloc entries are requests (their size), free_completed frees the block at that address (an
    address reused later is a new allocation), segment and snapshot entries are the allocator's own."""
    entries = [
        {"action": "segment_alloc", "addr": 0, "size": 2097152},
        {"action": "alloc", "addr": 0, "size": 1000},
        {"action": "alloc", "addr": 1024, "size": 3000},
        {"action": "free_requested", "addr": 0, "size": 1000},
        {"action": "free_completed", "addr": 0, "size": 1000},
        {"action": "snapshot", "addr": 0, "size": 0},
        {"action": "alloc", "addr": 0, "size": 500},
        {"action": "free_completed", "addr": 1024, "size": 3000},
        {"action": "segment_free", "addr": 0, "size": 2097152},
    ]
    trace = _step().trace_from_snapshot(entries, window_start=5)  # the step put the probe package on sys.path
    assert trace["events"] == [1000, 3000, -1, 500, -2]
    assert trace["window"] == [3, 5]
    from _allocator_model.replay import replay
    from _allocator_model.trace import Trace

    out = replay(Trace.from_json(trace))  # the window opens with the 3000 B block live: 3072 + 512 B
    assert out["est_reserved_peak_bytes"] == 2097152 and out["est_allocated_peak_bytes"] == 3072 + 512


def test_checks_fail_past_their_limits_and_skip_without_cuda():
    step = _step()
    cells = [{"hidden": 64, "precision": p, "ga": g, "cuda": {"precision_proved": True, "reserved_error": e,
              "allocated_error": 0.0}, "cpu": {"precision_proved": True, "reserved_error": 0.5}}
             for p in ("fp32", "bf16") for g, e in ((1, 0.0), (2, 0.03))]
    status = {c["name"]: c["status"] for c in step.checks(cells, None)}
    assert status["cuda_trace_reserved"] == "FAIL" and status["cuda_trace_allocated"] == "PASS"
    assert status["cpu_trace_reserved"] == "FAIL" and status["precision_proved"] == "PASS"
    skipped = {c["name"]: c["status"] for c in step.checks(cells, "no CUDA")}
    assert skipped["cuda_trace_reserved"] == skipped["cpu_trace_ga_cost"] == "SKIP"




def test_the_ga_cost_limit_holds_several_segments_over_the_widths():
    """One 20 MiB segment more or less between the widths moves the GA cost by SEGMENT_BYTES over
    their parameter difference: at the gpu_first widths that is a quarter of the limit, never most of it."""
    import torch

    step = _step()
    from allocator_cells import build_lm   # the step put its own folder on sys.path

    for hidden, layers, vocab in ((64, 2, 256), (96, 1, 512)):   # the count is build_lm's own
        model = build_lm(torch, hidden, layers, 4, vocab)
        assert step.n_params(hidden, layers, vocab) == sum(p.numel() for p in model.parameters())
    one = step.segment_bpp([1024, 2560], 4, 8192)
    assert one == pytest.approx(0.0724, abs=1e-4) and step.ga_cost_limit([1024, 2560], 4, 8192) == 0.3
    assert step.LIMITS["cpu_trace_ga_cost"] / one > 4
    assert step.segment_bpp([1024, 1536], 4, 8192) == pytest.approx(0.294, abs=1e-3)   # the knife edge it was
    assert step.ga_cost_limit([1024, 1536], 4, 8192) == pytest.approx(3 * 0.294, abs=3e-3)
    assert set(step.WHY) == set(step.LIMITS)


KILLED = """import os, signal, sys
sys.argv[1:] = ["--out", sys.argv[1], "--precisions", "bf16", "--sizes", "64,96"]
import importlib.util
spec = importlib.util.spec_from_file_location("am", {step!r})
am = importlib.util.module_from_spec(spec)
spec.loader.exec_module(am)
import torch
torch.cuda.get_device_name = lambda i: "planted"
am.cuda_unusable = lambda device: None                 # the CUDA half, planted: a model with no estimate
am.run_cuda = lambda cell: {{"max_reserved": 4 << 20, "max_allocated": 1 << 20, "model_reserved": None,
                            "model_allocated": None, "reserved_error": None, "allocated_error": None,
                            "precision_proved": True, "trace": {{"events": [1]}}}}
done = []
def cpu_cell(torch, cell):
    if len(done) == 2:
        os.kill(os.getpid(), signal.SIGKILL)           # killed in its third cell
    done.append(cell)
    return {{"precision_proved": True, "live_peak": 1, "est_reserved": None, "est_allocated": None,
            "trace": {{"events": [2]}}}}
am.cpu_cell = cpu_cell
sys.exit(am.main())
"""


def test_a_killed_allocator_model_keeps_its_finished_cells_and_no_missing_number_crashes_it(tmp_path):
    script = tmp_path / "killed.py"
    script.write_text(KILLED.format(step=STEP))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert proc.stdout.count("model on its trace None B (no number), allocated no number") == 3
    result = json.loads((tmp_path / "allocator_model.json").read_text())
    assert (result["complete"], result["cells_done"], result["cells_planned"], result["checks"]) == (False, 2, 4, [])
    assert [c["ga"] for c in result["cells"]] == [1, 2] and "trace" not in result["cells"][0]["cuda"]
    traces = json.loads((tmp_path / "allocator_model_traces.json").read_text())
    assert [t["cuda"]["events"] + t["cpu"]["events"] for t in traces] == [[1, 2], [1, 2]]
