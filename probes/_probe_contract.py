"""The probe side of the metrics-file contract, shared by the built-in probes (stdlib only).

A probe writes one JSON object with at least ``{"metrics": {name: finite number}}`` to the file
named by ``$BISECTOR_RESULT`` (else a ``--result`` path, else stdout). The write is atomic: the
JSON goes to a temporary file next to the target, which is then renamed over it, so the
orchestrator never reads half a result even when the probe is killed mid-write.

A built-in probe may opt in to the warm worker (probes/_warm_worker.py, a fork server per candidate
environment) by defining ``warm_imports()`` (``WARM_HOOK``) in its main script: it imports the heavy
modules any run of the probe may use (torch, the ML stack, the probe's own helpers) and nothing else
happens in it: no tensor op, no CUDA or NVML call (CUDA is initialised only in the forked runs), no
thread, no change to autocast or to the default dtype. The worker checks this and refuses otherwise;
each run is then a fork of the worker and runs the script as ``__main__`` exactly as a fresh
``python SCRIPT ARGS`` would after those imports (what they did to ``os.environ``, as torch's inductor
does at import, is done to each run's environment too). Custom probes and ``--probe-cmd`` always
run as plain processes.
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
