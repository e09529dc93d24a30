"""The probe side of the metrics-file contract, shared by the built-in probes (stdlib only).

A probe writes one JSON object with at least ``{"metrics": {name: finite number}}`` to the file
named by ``$BISECTOR_RESULT`` (else a ``--result`` path, else stdout). The write is atomic: the
JSON goes to a temporary file next to the target, which is then renamed over it, so the
orchestrator never reads half a result even when the probe is killed mid-write.
"""
import json
import os
import sys

RESULT_ENV = "BISECTOR_RESULT"


def write_result(result: dict, path=None) -> str:
    """Write ``result`` to $BISECTOR_RESULT, else ``path``, else stdout; returns where it went."""
    text = json.dumps(result, indent=1, sort_keys=False, allow_nan=False)
    target = os.environ.get(RESULT_ENV) or path
    if not target:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return "<stdout>"
    tmp = f"{target}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, target)
    return target
