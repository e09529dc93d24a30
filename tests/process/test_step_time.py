"""The built-in speed probe ``step_time``: its result (schema, per-precision step times and tokens per
second, warm-up discarded, seeded model and batch, what it ran on), its argument errors, and its
fingerprint (its own files and the contract, never ga_memory's)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bisector.data import probes_dir
from bisector.job.probe_code import builtin_files
from bisector.job.probe import BuiltinProbe, builtin_names

PROBE = probes_dir() / "step_time" / "__main__.py"
TINY = ["--hidden", "64", "--layers", "1", "--heads", "2", "--vocab", "128", "--seq-len", "16", "--batch", "2",
        "--warmup", "1", "--steps", "3"]


def run_probe(tmp_path: Path, *args: str, env: dict | None = None) -> tuple[int, dict, str]:
    out = tmp_path / f"result-{len(list(tmp_path.iterdir()))}.json"
    proc = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "BISECTOR_RESULT": str(out), **(env or {})})
    return proc.returncode, (json.loads(out.read_text()) if out.exists() else {}), proc.stderr


def test_fingerprint_covers_its_own_package_and_the_contract_only():
    assert "step_time" in builtin_names()
    files = {f.name for f in builtin_files(PROBE)}
    assert files == {"__main__.py", "_model.py", "_machine.py", "_probe_contract.py"}
    assert BuiltinProbe(name="step_time").fingerprint() != BuiltinProbe(name="ga_memory").fingerprint()
    text = "\n".join(f.read_text() for f in builtin_files(PROBE))
    assert "ga_memory" not in text and "bisector" not in text.replace("$BISECTOR_", "").replace("BISECTOR_", "")


def test_gpu_clocks_from_nvidia_smi_when_nvml_is_absent(tmp_path, monkeypatch):
    """The CUDA runtime is the one stand-in the suite allows: an nvidia-smi answering the query."""
    sys.path.insert(0, str(PROBE.parent))
    try:
        import _machine
    finally:
        sys.path.remove(str(PROBE.parent))
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/args\"\necho '1980, 2619, 1980, 2619, 41, 120.5, 0x0'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    clocks = _machine.gpu_clocks(0)
    if clocks.get("source") == "nvml":
        pytest.skip("NVML is present here: the clocks came from it")
    assert clocks == {"source": "nvidia-smi", "clocks.sm": "1980", "clocks.mem": "2619", "clocks.max.sm": "1980",
                      "clocks.max.mem": "2619", "temperature.gpu": "41", "power.draw": "120.5",
                      "clocks_throttle_reasons.active": "0x0"}
    assert (tmp_path / "args").read_text().startswith("--id=3 ")   # the physical id of the visible GPU
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert _machine.gpu_clocks(0)["unavailable"] == "neither pynvml nor nvidia-smi is present"
