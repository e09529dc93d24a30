"""Real probe subprocesses that crash, hang, flood, lie or run out of memory: each becomes a classified
outcome (never GOOD/BAD by itself), and the criterion maps it to a verdict."""
from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bisector.core.criterion import Criterion
from bisector.core.failure_rule import exit_code_verdict, failure_verdict
from bisector.core.measurement import Measurement
from bisector.core.verdict import Verdict
from bisector.measure.probe_process import run_probe
from bisector.job.probe import ExitCodeProbe, ScriptProbe

PROBES = {
    "ok": "import json, os\njson.dump({'metrics': {'m': 1.5}}, open(os.environ['BISECTOR_RESULT'], 'w'))",
    "crash": "raise RuntimeError('boom in probe')",
    "abort": "import os\nos.abort()",
    "hang": "import time\ntime.sleep(600)",
    "garbage": "import os\nopen(os.environ['BISECTOR_RESULT'], 'w').write('not json {')",
    "schema": "import json, os\njson.dump({'metrics': {'m': 'high'}}, open(os.environ['BISECTOR_RESULT'], 'w'))",
    "nan": "import json, os\nopen(os.environ['BISECTOR_RESULT'], 'w').write('{\"metrics\": {\"m\": NaN}}')",
    "silent": "print('all fine, honest')",
    "import": "import no_such_module_xyz",
    "oom": textwrap.dedent("""
        class OutOfMemoryError(RuntimeError):
            pass
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        """),
    "said-why": "import json, os, sys\njson.dump({'metrics': {}, 'error': 'no cell could be measured: transformers "
                "4.27 has no LlamaConfig'}, open(os.environ['BISECTOR_RESULT'], 'w'))\nprint('result written')\n"
                "sys.exit(3)",
    "oom-said": "import json, os, sys\njson.dump({'metrics': {}, 'error': 'no cell could be measured: OutOfMemoryError: "
                "CUDA out of memory'}, open(os.environ['BISECTOR_RESULT'], 'w'))\nsys.exit(3)",
    "flood": "import sys\nfor _ in range(200000): sys.stdout.write('x' * 100 + '\\n'); sys.stderr.write('y' * 100 + '\\n')\n"
             "sys.stderr.write('LAST LINE\\n'); sys.exit(1)",
    "children": "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                "time.sleep(600)",
}


def _run(tmp_path: Path, name: str, timeout: float = 60):
    script = tmp_path / f"{name}.py"
    script.write_text(PROBES[name])
    env = {"PATH": os.environ["PATH"]}
    return run_probe(ScriptProbe(path=script, timeout=timeout), Path(sys.executable), env)


@pytest.mark.parametrize("name,status,reason", [
    ("ok", "ok", None),
    ("crash", "crashed", "RuntimeError: boom in probe"),
    ("abort", "crashed", "signal 6"),
    ("garbage", "bad-output", "invalid probe result"),
    ("schema", "bad-output", "invalid probe result"),
    ("nan", "bad-output", "non-finite"),
    ("silent", "bad-output", "without writing a result"),
    ("import", "import-failed", "No module named 'no_such_module_xyz'"),
    ("oom", "oom", "CUDA out of memory"),
    ("flood", "crashed", "LAST LINE"),
    ("said-why", "crashed", "probe error: no cell could be measured: transformers 4.27 has no LlamaConfig"),
    ("oom-said", "oom", "probe error: no cell could be measured: OutOfMemoryError"),
])
def test_outcome_classes(tmp_path, name, status, reason):
    out = _run(tmp_path, name)
    assert out.status == status, (out.status, out.reason)
    if reason:
        assert reason in (out.reason or ""), out.reason
    if name == "ok":
        assert out.metrics == {"m": 1.5}
    if name == "flood":
        assert len(out.stderr_tail) < 70_000 and "bytes cut" in out.stderr_tail


def test_timeout_stops_the_whole_process_group(tmp_path):
    start = time.monotonic()
    out = _run(tmp_path, "children", timeout=2)
    assert out.status == "timeout"
    assert time.monotonic() - start < 10
    # the grandchild sleeping 600 s must be gone too
    ps = os.popen("ps -eo args").read()
    assert "time.sleep(600)" not in ps


def _m(status, exit_code=None, reason="r"):
    return Measurement(key="k", package="p", candidate="c", env_fingerprint="e", probe_fingerprint="f",
                       status=status, exit_code=exit_code, reason=reason, seconds=1.0)


@pytest.mark.parametrize("status,crit,verdict", [
    ("crashed", Criterion(), Verdict.SKIP),
    ("crashed", Criterion(crash_is_bad=True), Verdict.BAD),
    ("bad-output", Criterion(), Verdict.SKIP),
    ("timeout", Criterion(), Verdict.SKIP),
    ("timeout", Criterion(timeout_is_bad=True), Verdict.BAD),
    ("oom", Criterion(), Verdict.BAD),
    ("oom", Criterion(oom_is_bad=False), Verdict.SKIP),
    ("import-failed", Criterion(crash_is_bad=True), Verdict.SKIP),
    ("env-failed", Criterion(crash_is_bad=True), Verdict.SKIP),
])
def test_failure_classes_map_to_verdicts(status, crit, verdict):
    assert failure_verdict(_m(status), crit)[0] is verdict


@pytest.mark.parametrize("code,verdict", [(0, Verdict.GOOD), (1, Verdict.BAD), (127, Verdict.BAD),
                                          (125, Verdict.SKIP), (128, Verdict.SKIP), (-9, Verdict.SKIP)])
def test_exit_code_contract(code, verdict):
    assert exit_code_verdict(code)[0] is verdict


def test_exit_code_probe_runs_in_env_path(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python").symlink_to(sys.executable)
    spec = ExitCodeProbe(cmd="python -c 'import sys; sys.exit(3)'")
    out = run_probe(spec, bindir / "python", {"PATH": f"{bindir}:{os.environ['PATH']}"})
    assert out.status == "exit-code" and out.exit_code == 3
