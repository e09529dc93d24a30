"""The slow half of tests/process/test_workers.py: its tests that build real environments and run real probes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import pytest

from tests.process.test_workers import ROOT, SELF_KILLING  # noqa: F401 (helpers and fixtures)


def test_the_probe_survives_a_killed_worker_and_says_how_it_ended(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "selfkill.py").write_text(SELF_KILLING)
    out = tmp_path / "r.json"
    env = {**os.environ, "BISECTOR_RESULT": str(out), "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "probes", "ga_memory", "__main__.py"), "--device", "cpu",
                           "--model-factory", "selfkill:build", "--sizes", "32,48,64", "--precisions", "fp32",
                           "--ga", "1", "--workers", "2"], env=env, capture_output=True, text=True, timeout=300)
    result = json.loads(out.read_text())
    assert proc.returncode == 0, proc.stderr[-2000:]
    errors = {c["hidden"]: c.get("error") for c in result["cells"]}
    assert errors[32] is None and errors[64] is None
    assert errors[48].startswith(("killed: out of host memory", "worker killed by SIGKILL, not by the OOM killer"))
    assert result["workers"]["asked"] == 2 and result["workers"]["used"] == 2
    assert result["oom_cells"] == (["fp32.ga1.h48"] if errors[48].startswith("killed: out of") else [])
