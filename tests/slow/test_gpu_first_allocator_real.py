"""The slow half of tests/process/test_gpu_first_allocator.py: its tests that build real environments and run real probes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import pytest

from tests.process.test_gpu_first_allocator import STEP  # noqa: F401 (helpers and fixtures)


def test_cpu_dry_run_writes_the_step_file(tmp_path):
    pytest.importorskip("torch")
    env = {**os.environ, "DEV": "cpu", "OUT": str(tmp_path)}
    proc = subprocess.run([sys.executable, STEP, "--sizes", "64,128", "--layers", "1", "--heads", "4", "--vocab", "256",
                           "--seq-len", "16"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads((tmp_path / "allocator_model.json").read_text())
    assert result["cuda_skipped"] and len(result["cells"]) == 8
    for cell in result["cells"]:
        cpu = cell["cpu"]
        assert cpu["precision_proved"] and cpu["est_reserved"] >= cpu["est_allocated"] >= cpu["live_peak"] > 0
    status = {c["name"]: c["status"] for c in result["checks"]}
    assert status == {"precision_proved": "PASS", "cuda_trace_reserved": "SKIP", "cuda_trace_allocated": "SKIP",
                      "cpu_trace_reserved": "SKIP", "cpu_trace_ga_cost": "SKIP"}
    assert result["ga_cost_bf16"]["cpu_trace_model"] is not None
    traces = json.loads((tmp_path / "allocator_model_traces.json").read_text())
    assert len(traces) == 8 and all(t["cuda"] is None and t["cpu"]["format"] == "alloc-trace/1" for t in traces)
    assert "[allocator_model] PASS precision_proved" in proc.stdout
