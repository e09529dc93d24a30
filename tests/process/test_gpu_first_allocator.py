"""bench/gpu_first/allocator_model.py, the GPU run's allocator-model step, without a GPU: the CUDA
history it reads, turned into the model's trace, and its CPU dry run end to end (DEV=cpu)."""
from __future__ import annotations

import importlib.util
import os


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEP = os.path.join(ROOT, "bench", "gpu_first", "allocator_model.py")


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
    from _alloc_replay import replay
    from _alloc_trace import Trace

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


