"""Issue 34, "readers that never crash": a probe result that is no small JSON object (nested 100,000 deep, replaced
by a directory, not UTF-8) is a bad-output measurement with its reason, never an exception that aborts the run."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bisector.measure.probe_process import run_probe
from bisector.job.probe import ScriptProbe

PROBES = {
    "deep": "import os\nopen(os.environ['BISECTOR_RESULT'], 'w').write('{\"metrics\": ' + '[' * 100000 + ']' * 100000 + '}')",
    "deep-object": "import os\nopen(os.environ['BISECTOR_RESULT'], 'w').write('{\"a\":' * 100000 + '1' + '}' * 100000)",
    "directory": "import os\np = os.environ['BISECTOR_RESULT']\nos.path.exists(p) and os.unlink(p)\nos.mkdir(p)\n"
                 "open(os.path.join(p, 'x'), 'w').write('{}')",
    "not-utf8": "import os\nopen(os.environ['BISECTOR_RESULT'], 'wb').write(b'{\"metrics\": {\"m\": 1}, \"x\": \"\\xff\\xfe\"}')",
}
BATTERY = [f"probes: a result {name}" for name in PROBES]   # counted by tests/process/test_hostile.py


@pytest.mark.parametrize("name,reason", [("deep", "nested too deeply"), ("deep-object", "nested too deeply"),
                                         ("directory", "not a regular file"), ("not-utf8", "invalid probe result")])
def test_a_hostile_result_is_bad_output(tmp_path, name, reason):
    script = tmp_path / f"{name}.py"
    script.write_text(PROBES[name])
    out = run_probe(ScriptProbe(path=script, timeout=60), Path(sys.executable), {"PATH": os.environ["PATH"]})
    assert out.status == "bad-output", (out.status, out.reason)
    assert reason in (out.reason or ""), out.reason
