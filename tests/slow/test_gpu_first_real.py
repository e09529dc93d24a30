"""The slow half of tests/process/test_gpu_first.py: its tests that build real environments and run real probes."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.process.test_gpu_first import BENCH, _host_side, dry_run  # noqa: F401 (helpers and fixtures)

import gf  # noqa: E402 (acceptance/gpu_first is on sys.path once the process half is imported)
import verdicts  # noqa: E402


def test_the_dry_run_writes_every_steps_files_and_check_md(dry_run):
    out, proc = dry_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name, _, _ in gf.planned_steps():
        data = json.loads((out / f"{name}.json").read_text())
        assert data["status"] == "done" and (out / f"{name}.log").exists(), (name, data)
        assert data["checks"] and all(c["result"] in ("PASS", "SKIP") for c in data["checks"]), data["checks"]
        assert all(c["detail"] == "needs CUDA (DEV=cpu dry run)" for c in data["checks"] if c["result"] == "SKIP")
    check = (out / "check.md").read_text()
    assert check.startswith("# acceptance/gpu_first: PASS (dry run on the CPU: ")
    assert "| pythia-1.4b | bf16 | 0.86 |" in check and "| llama-7b | fp32 | 0.18 |" in check
    assert proc.stdout.rstrip().endswith(check.rstrip())  # printed last


def test_the_host_reads_what_the_dry_run_brought_back(dry_run, tmp_path):
    out, _ = dry_run
    seen, listed = _host_side(tmp_path, out)
    assert listed == [] and set(seen) >= {"meter.probe", "invariants.isolated", "seed.pythia-1.4b", "seed.llama-7b"}


# --- a real step forced past its cap (issue 36) -----------------------------------------------------------
STALL = '''import os, signal
_target = os.environ.get("BISECTOR_RESULT", "")
if _target.endswith("meter.probe.json"):       # the meter step's first probe, on a device that stops answering
    _replace = os.replace

    def _stall(src, dst, *args, **kwargs):
        _replace(src, dst, *args, **kwargs)
        if os.fspath(dst) == _target:           # its first finished cell is written: then nothing more comes
            os.kill(os.getpid(), signal.SIGSTOP)

    os.replace = _stall
'''


def _running_for(work: Path) -> list:
    """Live processes whose environment names ``work`` as the run's work directory (every process the
    run started: the runner, the steps, the probes and their workers)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"GF_OUT={work}".encode() in environ and state != "Z":
            found.append(int(name))
    return found


def test_a_real_step_cut_at_its_cap_leaves_nothing_keeps_its_cells_and_only_it_is_incomplete(tmp_path):
    """The real meter step on the CPU, its cap forced to 60 s (run.sh's step line) and its device
    stopping after the probe's first cell (a sitecustomize planted on PYTHONPATH SIGSTOPs the probe
    once its partial result holds that cell), then the real invariants step, which reads the meter
    step's result. The probe is cut at the step's deadline (50 s in, before the probe's own 55 s
    timeout) and the later commands are not started:
    no process of the run is left, the finished cell is kept, check.md says INCOMPLETE for the meter
    step only (the invariants step's comparison with the partial result is SKIP), and not FAIL."""
    bench = tmp_path / "repo" / "acceptance" / "gpu_first"    # a copy of the runner, beside the real probes
    shutil.copytree(BENCH, bench, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "repo" / "probes").symlink_to(BENCH.parents[1] / "probes")
    lines = [ln for ln in (BENCH / "run.sh").read_text().splitlines() if not ln.startswith("step ")]
    at = lines.index('"$PY" "$HERE/report.py"')
    (bench / "run.sh").write_text("\n".join(lines[:at] + ["step meter 55 60", "step invariants 45 150"] + lines[at:]))
    (tmp_path / "stall").mkdir()
    (tmp_path / "stall" / "sitecustomize.py").write_text(STALL)
    out, work = tmp_path / "out", tmp_path / "work"
    path = os.pathsep.join([str(tmp_path / "stall"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "OUT": str(out), "WORK": str(work), "DEV": "cpu", "PYTHON": sys.executable, "PYTHONPATH": path}
    try:
        proc = subprocess.run(["bash", str(bench / "run.sh")], env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert _running_for(work) == []
    finally:   # whatever failed, nothing of this run outlives the test
        for pid in _running_for(work):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    meter = json.loads((work / "meter.json").read_text())
    results = {c["id"]: c["result"] for c in meter["checks"] if c["check"].startswith("probe:")}
    assert meter["status"] == "done" and meter["leftover_processes"] == 0
    assert results == {"meter.measured": "INCOMPLETE", "meter.reference": "INCOMPLETE",
                       "meter.reference_on_cuda": "SKIP", "meter.vs_reference": "SKIP"}, meter["checks"]
    assert meter["facts"]["commands"]["probe probe"]["exit"] == verdicts.said(verdicts.INNER_TIMEOUT)
    assert meter["facts"]["commands"]["reference"]["exit"] == verdicts.said(verdicts.NOT_STARTED)
    finished = re.findall(r"\[ga_memory\] cell (\d+)/(\d+) (h\d+) t\d+ (\w+) ga(\d)", (work / "meter.log").read_text())
    kept = json.loads((work / "results" / "meter.probe.json").read_text())
    assert finished and kept["partial"] == {"done": len(finished), "planned": int(finished[0][1])}
    assert sorted(verdicts.measured(kept)) == sorted(f"{p}.ga{g}.{h}" for _, _, h, p, g in finished)
    invariants = json.loads((work / "invariants.json").read_text())
    same = next(c for c in invariants["checks"] if c["id"] == "invariants.same_peaks")
    assert same["result"] == "SKIP" and "partial (1 of 8 cells)" in same["detail"]
    check = (out / "check.md").read_text()
    assert check.startswith("# acceptance/gpu_first: INCOMPLETE")
    rows, step = [], None
    for line in check.split("\n## ")[0].splitlines():
        cols = [c.strip() for c in line.split("|")]
        if line.startswith("| ") and len(cols) == 9 and cols[1] != "step":
            step = cols[1] or step
            rows.append((step, cols[4], cols[6]))
    assert {s for s, _, result in rows if "INCOMPLETE" in result} == {"meter"}
    assert not [r for r in rows if "FAIL" in r[2]]
    assert [status for s, status, _ in rows if s == "meter" and status] == ["done, INCOMPLETE (a command ran out of time)"]
