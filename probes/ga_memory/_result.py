"""Assembling and writing the probe's result (the JSON the orchestrator validates).

Shape: ``metrics`` (flat finite floats), ``schema_version``, ``probe`` {name, version,
config_hash, config}, ``versions``, ``device``, ``meter``, ``cells``, ``fit``, optional
``timings`` and ``error``. Written to $BISECTOR_RESULT, else ``--result``, else stdout.
"""
from __future__ import annotations

import math
import os
import platform

from _meters.phases import DEVICE_METER
from _probe_contract import RESULT_ENV, cpu_name, write_result  # noqa: F401 - RESULT_ENV re-exported

SCHEMA_VERSION = "ga_memory/2"


def _version(module_name):
    try:
        module = __import__(module_name)
        return str(getattr(module, "__version__", None))
    except Exception:  # noqa: BLE001 - a broken import is reported as missing
        return None


def versions() -> dict:
    """Versions of the ML stack and Python as seen by this interpreter."""
    return {
        "torch": _version("torch"),
        "accelerate": _version("accelerate"),
        "transformers": _version("transformers"),
        "python": platform.python_version(),
    }


CUDA_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG", "CUDA_VISIBLE_DEVICES")


def proc_driver_version():
    """The NVIDIA kernel driver version from /proc (no NVML needed), or None."""
    try:
        with open("/proc/driver/nvidia/version") as fh:
            first = fh.readline()
    except OSError:
        return None
    words = [w for w in first.split() if w[:1].isdigit() and "." in w]
    return words[0] if words else None


def _cuda_info(torch) -> dict:
    from _meters.cuda import NvmlProbe

    props = torch.cuda.get_device_properties(0)
    nvml = NvmlProbe()
    info = {
        "type": "cuda",
        "name": props.name,
        "uuid": str(getattr(props, "uuid", "")) or None,
        "driver": nvml.driver() or proc_driver_version(),
        "cuda": torch.version.cuda,
        "capability": f"{props.major}.{props.minor}",
        "total_bytes": int(props.total_memory),
        "mig": nvml.mig_mode(),
        "nvml": f"device {nvml.uuid}" if nvml.uuid else f"unavailable: {nvml.unavailable}",
        "env": {k: os.environ[k] for k in CUDA_ENV if k in os.environ},
    }
    return info


def device_info(device: str) -> dict:
    """What the cells ran on: name, UUID, driver, CUDA runtime, MIG, allocator settings (CUDA) or
    CPU model and threads. ``requested`` is the device the probe was asked for."""
    import torch

    if device == "cuda":
        try:
            return _cuda_info(torch)
        except Exception as exc:  # noqa: BLE001 - asked for CUDA where there is none
            return {"type": "cuda", "name": None, "driver": proc_driver_version(), "cuda": torch.version.cuda,
                    "error": f"{type(exc).__name__}: {exc}"}
    return {"type": "cpu", "name": cpu_name(), "driver": None, "cuda": None,
            "threads": torch.get_num_threads()}


def _cell_name(cell) -> str:
    return f"{cell['precision']}.ga{cell['ga']}.h{cell['hidden']}"


def _is_oom(error: str) -> bool:
    return any(word in error for word in ("OutOfMemoryError", "out of memory", "Cannot allocate memory",
                                          "can't allocate memory", "MemoryError", "out of host memory"))


def cells_meter(device: str, cells) -> str:
    """The meter the measured cells name (each cell records its own), else the device's."""
    kinds = sorted({c["meter"] for c in cells if c.get("meter") and "peak_bytes" in c})
    return "+".join(kinds) if kinds else DEVICE_METER.get(device, device)


def _clean(value):
    """Replace non-finite floats (JSON has none) with None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def assemble(probe: dict, spec: dict, cells, metrics, fits, error=None) -> dict:
    """The result dict; ``error`` is set when nothing could be measured."""
    result = {
        "schema_version": SCHEMA_VERSION,
        "probe": {**probe, "config": spec},
        "versions": versions(),
        "device": {**device_info(spec["device"]), "requested": spec.get("device_requested")},
        "meter": cells_meter(spec["device"], cells),
        "metrics": {k: float(v) for k, v in metrics.items() if math.isfinite(v)},
        "fit": fits,
        "cells": cells,
    }
    failed = [c for c in cells if c.get("error")]
    if failed:
        result["cell_errors"] = len(failed)
        result["oom_cells"] = [_cell_name(c) for c in failed if _is_oom(c["error"])]
    if error:
        result["error"] = error
    return _clean(result)


PARTIAL_ERROR = "the probe did not finish: {done} of {planned} cells were measured when this was written"


def partial(probe: dict, spec: dict, cells, planned: int) -> dict:
    """The result as it stands after ``len(cells)`` of ``planned`` cells: the finished cells (in the
    order they finished), the meter, the device's type only (reading the device's facts would start a
    CUDA context in the probe, beside its isolated cells), no metrics (a run that did not finish has no
    number the host may use) and an ``error`` saying so; the final result replaces it."""
    result = {
        "schema_version": SCHEMA_VERSION,
        "probe": {**probe, "config": spec},
        "versions": versions(),
        "device": {"type": spec["device"], "requested": spec.get("device_requested")},
        "meter": cells_meter(spec["device"], cells),
        "metrics": {},
        "cells": list(cells),
        "partial": {"done": len(cells), "planned": planned},
        "error": PARTIAL_ERROR.format(done=len(cells), planned=planned),
    }
    failed = [c for c in cells if c.get("error")]
    if failed:
        result["cell_errors"] = len(failed)
        result["oom_cells"] = [_cell_name(c) for c in failed if _is_oom(c["error"])]
    return _clean(result)


def write(result: dict, path=None) -> str:
    """Write to $BISECTOR_RESULT, else ``path``, else stdout (atomically); returns where it went."""
    return write_result(result, path)
