"""Where a acceptance/gpu_first run keeps what it finds (standard library only; imports nothing of ours).

The runner (gf.py), the report (report.py) and the steps share these: the work directory
(``$GF_OUT``), the directory that comes back (``$GF_RETURN``), the device asked for (``$GF_DEV``),
the steps' JSON files and the probe results they keep, and run.sh's plan.
"""
from __future__ import annotations

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLE_NAME = "gpu_first.tgz"


def out_dir() -> str:
    """Where the steps write (the work directory; run.sh: $WORK)."""
    return os.environ.get("GF_OUT") or os.path.join(os.getcwd(), "gpu-first")


def return_dir():
    """Where what comes back goes (the bundle and check.md; run.sh: $OUT), or None."""
    return os.environ.get("GF_RETURN") or None


def dev() -> str:
    return os.environ.get("GF_DEV", "cuda")


def budget_s() -> float:
    return float(os.environ.get("GF_BUDGET", "520"))


def write_json(path: str, data) -> None:
    """``data`` as JSON at ``path``, atomically (a kill leaves the old file or the new one)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=False)
    os.replace(tmp, path)


def read_json(path: str):
    """The JSON in ``path``, or None where there is none (or it is not JSON)."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def load(name: str):
    """A step's JSON as written so far, or None."""
    return read_json(os.path.join(out_dir(), f"{name}.json"))


def result(step: str, label: str):
    """The probe result an earlier step kept (``results/<step>.<label>.json``), or None."""
    return read_json(os.path.join(out_dir(), "results", f"{step}.{label}.json"))


def planned_steps() -> list:
    """The runner's steps in order, as run.sh lists them: [(name, planned GPU seconds, cap seconds)]."""
    steps = []
    with open(os.path.join(HERE, "run.sh")) as fh:
        for line in fh:
            words = line.split("#", 1)[0].split()
            if len(words) == 4 and words[0] == "step":
                steps.append((words[1], float(words[2]), float(words[3])))
    return steps


def num(value, spec: str = "") -> str:
    """``value`` formatted with ``spec``, or ``-`` where it is not a number (a missing value never crashes)."""
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"
