"""The slow half of tests/process/test_gpu_first.py: its tests that build real environments and run real probes."""
from __future__ import annotations

import json
from tests.process.test_gpu_first import _host_side, dry_run  # noqa: F401 (helpers and fixtures)

import gf  # noqa: E402 (bench/gpu_first is on sys.path once the process half is imported)


def test_the_dry_run_writes_every_steps_files_and_check_md(dry_run):
    out, proc = dry_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name, _, _ in gf.planned_steps():
        data = json.loads((out / f"{name}.json").read_text())
        assert data["status"] == "done" and (out / f"{name}.log").exists(), (name, data)
        assert data["checks"] and all(c["result"] in ("PASS", "SKIP") for c in data["checks"]), data["checks"]
        assert all(c["detail"] == "needs CUDA (DEV=cpu dry run)" for c in data["checks"] if c["result"] == "SKIP")
    check = (out / "check.md").read_text()
    assert check.startswith("# bench/gpu_first: PASS (dry run on the CPU: ")
    assert "| pythia-1.4b | bf16 | 0.86 |" in check and "| llama-7b | fp32 | 0.18 |" in check
    assert proc.stdout.rstrip().endswith(check.rstrip())  # printed last


def test_the_host_reads_what_the_dry_run_brought_back(dry_run, tmp_path):
    out, _ = dry_run
    seen, listed = _host_side(tmp_path, out)
    assert listed == [] and set(seen) >= {"meter.probe", "invariants.isolated", "seed.pythia-1.4b", "seed.llama-7b"}
