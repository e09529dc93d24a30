"""Issue 47, item 8: acceptance/gpu_first ends its step's processes whoever is signalled. A SIGTERM or SIGINT to
run.sh, to the ``timeout`` it runs under (as a device's own limit sends), or to the step runner (``gf.py step``)
sweeps the running step's session (the step, its commands' process groups, what left them) before the runner
exits; the step is recorded as interrupted and check.md and the bundle still come back; run.sh then ends with
the signal's code (a signal to the runner alone ends that step only: the run goes on, as after its timeout). Before, a SIGTERM to
``timeout`` ended the runner and the step went on with parent 1, starting its next command (the CPU dry run,
once). The runner is the real run.sh and gf.py (DEV=cpu), with a planted step that starts a probe-like child in
a group of its own and then, like meter.py, would start another command."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.process.test_gpu_first import _alive, _daemons, _runner_copy

STUCK = ("import os, subprocess, sys, time\nsys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
         "import gf\nstep = gf.Step('stuck')\nstep.check('facts.stack', ('PASS', 'ok'))\n"
         "step.run('child', [sys.executable, os.environ['CHILD'], os.environ['PIDS'] + '.stuck', 'daemon'], "
         "dict(os.environ), 60)\n"
         "step.run('next', [sys.executable, os.environ['CHILD'], os.environ['PIDS'] + '.next'], dict(os.environ), 60)\n"
         "sys.exit(step.done())\n")
TARGETS = ["run.sh", "timeout", "the step runner"]
BATTERY = [f"gpu_first: {sig} to {target} sweeps the step's session"
           for sig in ("SIGTERM", "SIGINT") for target in TARGETS]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _wait_for(what, within: float = 60.0):
    end = time.monotonic() + within
    while time.monotonic() < end:
        found = what()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("never came")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("target", TARGETS)
def test_a_signal_to_the_run_sweeps_the_steps_session(tmp_path, target, sig):
    bench = _runner_copy(tmp_path, ["stuck 1 90", "quick 1 10"])
    (bench / "stuck.py").write_text(STUCK)
    out, work, pids = tmp_path / "out", tmp_path / "work", str(tmp_path / "pids")
    env = {**os.environ, "OUT": str(out), "WORK": str(work), "DEV": "cpu", "PYTHON": sys.executable,
           "CHILD": str(tmp_path / "child.py"), "PIDS": pids}
    proc = subprocess.Popen(["timeout", "120", "bash", str(bench / "run.sh")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:   # whatever fails, nothing planted outlives the test (each carries a path under tmp_path)
        _wait_for(lambda: Path(f"{pids}.stuck").exists())   # the step's child and its sleeper run
        runner = _wait_for(lambda: [p for p in _daemons(str(bench / "gf.py")) if " step stuck " in _cmdline(p)])[0]
        shell = _wait_for(lambda: [p for p in _daemons(str(bench / "run.sh")) if _cmdline(p).startswith("bash ")])[0]
        os.kill({"run.sh": shell, "timeout": proc.pid, "the step runner": runner}[target], sig)
        said, _ = proc.communicate(timeout=60)
        started = [int(p) for p in Path(f"{pids}.stuck").read_text().split()]
        assert not [p for p in started if _alive(p)], said
        assert not _daemons(str(tmp_path)), said   # the step, its child, the sleeper, the daemon, the runner
        assert not Path(f"{pids}.next").exists(), said   # the step did not go on to its next command
    finally:
        for pid in _daemons(str(tmp_path)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    quick = (work / "quick.json").exists()
    if target == "the step runner":   # only that step ended: the run goes on with the next one, as after a timeout
        assert proc.returncode == 0 and quick, said
    else:                             # the run ends with the signal, after the sweep
        assert proc.returncode == 128 + sig and not quick and f"stopped by SIG{signal.Signals(sig).name[3:]}" in said
    stuck = json.loads((work / "stuck.json").read_text())
    assert stuck["status"] == "interrupted" and stuck["checks"][-1]["result"] == "INCOMPLETE", stuck
    assert f"stopped by {signal.Signals(sig).name}" in stuck["checks"][-1]["detail"], stuck
    assert stuck["leftover_processes"] >= 3   # the step, its child, the sleeper
    assert (out / "check.md").exists() and (out / "gpu_first.tgz").exists(), said
