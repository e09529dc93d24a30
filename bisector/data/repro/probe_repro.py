#!/usr/bin/env python3
# >>> header
# A standalone reproduction of a Python probe's measurement (bisector writes the run's own header here: what
# it reproduces, both sides' pins and install lines).
# <<<
"""Runs the bisect's probe (PROBE, below, with its own helper modules in MODULES, as the bisect ran them)
with the bisect's arguments (ARGS) and prints METRIC from its result with its verdict: exit 0 when GOOD, 1
when BAD by THRESHOLD, so ``git bisect run python this.py`` works too. Run by bisector (``$BISECTOR_RESULT``
set), the probe's result goes there and bisector judges it. Nothing in it imports bisector.
"""
import base64  # noqa: F401 (the embedded files below may be written from base64)
import json
import os
import sys
import tempfile
import types

USAGE = ""   # (no arguments: the bisect's probe with the bisect's arguments)
# >>> settings
ARGS = []   # the bisect's probe arguments
METRIC, THRESHOLD, DIRECTION = "m", 1.0, "increase"
ENV = {}   # what bisector told the probe (set only where the environment does not say)
PROBE_NAME = "probe.py"
MODULES = {}   # the probe's own helper modules: name -> source
PROBE = ""   # the probe's source
# <<<


def main(argv):
    arguments(argv)
    for name, source in MODULES.items():
        module = types.ModuleType(name)
        exec(compile(source, f"{name}.py", "exec"), module.__dict__)   # noqa: S102 - the probe's own module
        sys.modules[name] = module
    for key, value in ENV.items():
        os.environ.setdefault(key, value)
    with tempfile.TemporaryDirectory() as tmp:
        result = os.environ.setdefault("BISECTOR_RESULT", os.path.join(tmp, "result.json"))
        sys.argv = [PROBE_NAME, *ARGS]
        try:
            exec(compile(PROBE, PROBE_NAME, "exec"), {"__name__": "__main__",   # noqa: S102 - the probe itself
                                                      "__file__": os.path.join(tmp, PROBE_NAME)})
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise
        with open(result) as fh:
            found = json.load(fh)["metrics"]
    bad = judged(found[METRIC])
    return 1 if bad and result.startswith(tmp) else 0   # run by bisector: it judges the result file


# >>> common
# <<<


# >>> units
UNITS, DECLARED_UNITS = "", {}   # bisector's unit formatting (bisector/core/units.py), the probe's declared units
# <<<


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
