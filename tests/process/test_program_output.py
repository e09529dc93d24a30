"""What a probe (your program) printed is kept with its measurement, shown as it comes with -v, shown on a failed
step, stored redacted, and printed back by ``bisector log RUN --output STEP``."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from bisector.core.measurement import Measurement, Status
from bisector.core.verdict import Verdict
from bisector.job.probe import ScriptProbe
from bisector.measure.probe_process import run_probe
from bisector.measure.program_output import KEPT_LINES, failure_lines
from bisector.store.records import StepRow
from bisector.store.run_record import RunRecord
from bisector.store.storage import RunKind, Store

NOISY = """\
import sys
for i in range(250):
    print(f"line {i}", flush=True)
print("warning: almost", file=sys.stderr, flush=True)
raise SystemExit("boom: the culprit's error")
"""


def test_a_probe_s_output_is_kept_and_handed_over_line_by_line(tmp_path):
    script = tmp_path / "noisy.py"
    script.write_text(NOISY)
    seen = []
    out = run_probe(ScriptProbe(path=script, timeout=60), Path(sys.executable), {"PATH": os.environ["PATH"]},
                    on_output=lambda stream, line: seen.append((stream, line)))
    assert out.status is Status.CRASHED and out.reason.endswith("boom: the culprit's error")
    assert len(out.output["stdout"]) == KEPT_LINES and out.output["stdout"][-1] == "line 249"
    assert out.output["stderr"] == ["warning: almost", "boom: the culprit's error"]
    assert [line for stream, line in seen if stream == "stdout"] == [f"line {i}" for i in range(250)]
    assert ("stderr", "boom: the culprit's error") in seen
    details = out.details()
    assert details["output"] == out.output and failure_lines(details) == out.output["stderr"]


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bisector", *argv], capture_output=True, text=True, timeout=120)


def test_log_output_prints_a_steps_output_back_redacted(tmp_path):
    store = Store(tmp_path / "s.db")
    secret = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuV"
    m = Measurement(key="k1", package="tinypkg", candidate="1.2.0", env_fingerprint="e", probe_fingerprint="p",
                    repeat=0, status=Status.CRASHED, seconds=1.0, reason="probe exited 1: boom",
                    details={"output": {"stdout": ["step 1", f"token {secret}"], "stderr": ["Traceback", "boom"]}})
    store.put_measurement(m)
    record = RunRecord(store, RunKind.BISECT, ["bisector", "run"], {"job": {"package": "tinypkg"}}, "h")
    record.begin()
    record.step(StepRow(run_id=record.run_id, seq=0, candidate="releases 1.2.0", verdict=Verdict.BAD, seconds=1.0,
                        reason="crashed: boom", measurements=["k1"]))
    record.save("interrupted")
    store.close()
    done = _cli("log", record.run_id, "--store", str(tmp_path / "s.db"), "--output", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "# step 1: releases 1.2.0 bad # crashed: boom"
    assert lines[2:4] == ["### stdout (its last 2 lines)", "step 1"] and "Traceback" in lines
    assert secret not in done.stdout and lines[4].startswith("token ")
    wrong = _cli("log", record.run_id, "--store", str(tmp_path / "s.db"), "--output", "2")
    assert wrong.returncode == 2 and wrong.stderr.strip().endswith("has 1 step(s): --output takes 1 to 1")


def test_verbose_shows_the_programs_lines_apart_from_bisectors(tmp_path):
    """-v: each line of the probe's output after its candidate and stream; never under 'bisector: '."""
    from bisector.cli.main import _logging
    import logging
    from bisector.measure.program_output import OUTPUT_LOGGER, echo

    class Args:
        verbose, quiet = True, False

    _logging(Args())
    try:
        show = echo("tinypkg 1.2.0")
        assert show is not None
        handler = logging.getLogger(OUTPUT_LOGGER).handlers[0]
        record = logging.LogRecord(OUTPUT_LOGGER, logging.INFO, __file__, 1, "  %s %s| %s",
                                   ("tinypkg 1.2.0", "!", "boom \x1b[31m"), None)
        assert handler.format(record) == "  tinypkg 1.2.0 !| boom \\x1b[31m"
        assert logging.getLogger(OUTPUT_LOGGER).propagate is False
    finally:
        for name in ("bisector", OUTPUT_LOGGER):
            logging.getLogger(name).handlers.clear()
            logging.getLogger(name).setLevel(logging.NOTSET)
        logging.getLogger(OUTPUT_LOGGER).propagate = True
    assert echo("x") is None
