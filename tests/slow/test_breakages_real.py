"""The slow half of tests/process/test_breakages.py: its tests that build real environments and run real probes."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.process.test_breakages import POISONED, SCRIPT  # noqa: F401 (helpers and fixtures)


def test_a_skipped_measured_fp16_step_fails_its_cell(tmp_path):
    """A real GradScaler (on the CPU: --fp16-init-scale) that skips the measured step: the cell is an
    error saying so, never a number (without the check it would fail only as an unproved fp16)."""
    (tmp_path / "poisoned.py").write_text(POISONED)
    out = tmp_path / "r.json"
    env = {**os.environ, "BISECTOR_RESULT": str(out), "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, SCRIPT, "--device", "cpu", "--model-factory", "poisoned:build",
                           "--sizes", "32", "--precisions", "fp16", "--ga", "1", "--fp16-init-scale", "65536"],
                          env=env, capture_output=True, text=True, timeout=300)
    (cell,) = json.loads(out.read_text())["cells"]
    assert proc.returncode == 3 and "peak_bytes" not in cell, proc.stderr[-2000:]
    assert cell["error"].startswith("SkippedStep: the fp16 GradScaler skipped the measured step"), cell["error"]
