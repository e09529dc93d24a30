"""The probe side of the result contract, shared by the built-in probes (stdlib only): ``write_result`` and
``cpu_name``.

The contract itself (the result's fields, the shape of ``device``, units, exit codes) is probes/CONTRACT.md,
rendered from the host's result model. In short: one JSON object with at least ``{"metrics": {name: finite
number}}`` in the file named by ``$BISECTOR_RESULT``, then exit 0; ``error`` and a non-zero exit when nothing
could be measured. The write is atomic: the JSON goes to a temporary file next to the target, which is then
renamed over it, so a probe killed mid-write never leaves half a result.

A built-in probe may opt in to warm runs by defining ``warm_imports()`` (``WARM_HOOK``) in its main script:
what it may do there is in probes/README.md ("Warm runs").
"""
import json
import os
import platform
import sys

RESULT_ENV = "BISECTOR_RESULT"
WARM_HOOK = "warm_imports"


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


def cpu_name() -> str:
    """The CPU's model name (what a result's ``device.name`` says on the CPU)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
