"""The command meter's in-process half: loaded by ``sitecustomize`` into every Python process of a user's
command (children too), it does nothing until ``torch`` is imported, then records per optimizer step.

A step is the time from the end of one ``optimizer.step()`` to the end of the next, as torch's global
optimizer hooks see them (the user's own loop, accelerate and ``transformers.Trainer`` all call
``optimizer.step()``). Each process appends JSON lines to ``$BISECTOR_METER_RECORDS/<pid>.jsonl``: ``load``
when Python starts, ``torch`` when torch is imported (version, device, meter), ``step`` after every step
(flushed at once: a killed or ``os._exit``-ing process keeps the steps it finished) and ``end`` at exit.

Per step: on the CPU, live tensor-storage bytes counted exactly (the probes' meter library,
``_meters/tensor_bytes.py``: ``LiveBytes``; ``$BISECTOR_METER_KIND=rss`` leaves it out: RSS and time only); on CUDA,
``max_memory_allocated`` / ``max_memory_reserved`` since the step began and the allocated / reserved bytes
at its end, NVML's used bytes of this process's GPU (by UUID) where ``pynvml`` is importable; the peak RSS
of the step (``/proc/self/clear_refs`` + ``VmHWM`` where the kernel allows it); wall seconds. Nothing is
printed: the program's stdout and stderr are its own. Imports only the stdlib until torch is imported.
"""
import importlib.abc
import importlib.util
import json
import os
import sys
import time

RECORDS_ENV, KIND_ENV, DEVICE_ENV = "BISECTOR_METER_RECORDS", "BISECTOR_METER_KIND", "BISECTOR_METER_DEVICE"
METER_LIBRARY = "_meters.tensor_bytes"   # the exact live-bytes count (what bisector's fingerprint follows)
_state = {"fd": None, "t0": None, "steps": 0, "window_t": None, "torch": None, "bytes": None, "cuda": None,
          "nvml": None, "rss_step": False, "run_peak_cuda": 0, "run_peak_cuda_reserved": 0, "installed": False}


def _write(record):
    fd = _state["fd"]
    if fd is None:
        return
    try:
        os.write(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
    except OSError:
        pass


def _open_record(extra):
    directory = os.environ.get(RECORDS_ENV)
    if not directory:
        return
    try:
        _state["fd"] = os.open(os.path.join(directory, f"{os.getpid()}.jsonl"),
                               os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:
        _state["fd"] = None
        return
    _state["t0"] = time.perf_counter()
    _write({"kind": "load", "pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[:4] if hasattr(sys, "argv")
            else [], "executable": sys.executable, "prefix": sys.prefix, "rank": os.environ.get("RANK"),
            "local_rank": os.environ.get("LOCAL_RANK"), "world_size": os.environ.get("WORLD_SIZE"), **extra})


def _status_kib(field):
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _clear_hwm():
    """Reset the kernel's peak-RSS mark of this process (``5`` > clear_refs); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _max_rss():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Runs ``_on_torch`` right after ``import torch`` finishes (and then leaves the import system)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            _on_torch(module)

        loader.exec_module = exec_module
        return spec


def _device(torch):
    asked = os.environ.get(DEVICE_ENV) or os.environ.get("BISECTOR_DEVICE") or "auto"
    if asked == "auto":
        try:
            return "cuda" if torch.cuda.is_available() else "cpu"
        except Exception:  # noqa: BLE001 - a broken CUDA install measures on the CPU and says so
            return "cpu"
    return asked


def _on_torch(torch):
    try:
        _start(torch)
    except Exception as exc:  # noqa: BLE001 - the meter never breaks the program; the record says why
        _write({"kind": "meter_error", "error": f"{type(exc).__name__}: {exc}"[:500]})


def _start(torch):
    _state["torch"] = torch
    kind = os.environ.get(KIND_ENV) or "tensors"
    device = _device(torch)
    try:
        import torch.optim.optimizer as optim_base
    except ImportError:
        optim_base = None
    hooks = getattr(optim_base, "register_optimizer_step_post_hook", None)
    if device == "cpu" and kind == "tensors":
        meter = _library().LiveBytes("cpu")
        meter.__enter__()   # for the rest of the process: every aten op is counted
        _state["bytes"] = meter
    _state["cuda"] = device == "cuda"
    _state["rss_step"] = _clear_hwm()
    _state["window_t"] = time.perf_counter()
    _write({"kind": "torch", "version": torch.__version__, "git_version": getattr(torch.version, "git_version", None),
            "cuda_version": torch.version.cuda, "device": device, "meter_kind": kind,
            "meter": "cuda" if device == "cuda" else ("cpu-dispatch" if kind == "tensors" else "rss"),
            "threads": torch.get_num_threads(), "rss_scope": "step" if _state["rss_step"] else "run",
            "optimizer_hooks": hooks is not None})
    if hooks is not None:
        optim_base.register_optimizer_step_pre_hook(_pre_step)
        hooks(_post_step)


def _library():
    """The module of the probes' meter library this meter counts with (``METER_LIBRARY``, probes/_meters),
    loaded by path under a package name of its own: the program's ``sys.path`` and modules stay as they were."""
    package, _, module = METER_LIBRARY.partition(".")
    alias = "_bisector" + package
    if alias not in sys.modules:
        root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), package)
        spec = importlib.util.spec_from_file_location(alias, os.path.join(root, "__init__.py"),
                                                      submodule_search_locations=[root])
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[alias] = loaded
        spec.loader.exec_module(loaded)
    return importlib.import_module(f"{alias}.{module}")


def _cuda_ready(torch):
    return _state["cuda"] and torch.cuda.is_initialized()


def _pre_step(optimizer, args, kwargs):
    meter = _state["bytes"]
    if meter is not None:
        _state["pre_bytes"] = meter.current


def _post_step(optimizer, args, kwargs):
    try:
        _step_end(_state["torch"])
    except Exception as exc:  # noqa: BLE001
        _write({"kind": "meter_error", "error": f"{type(exc).__name__}: {exc}"[:500]})


def _step_end(torch):
    record = {"kind": "step", "i": _state["steps"]}
    if _cuda_ready(torch):
        dev = torch.cuda.current_device()
        torch.cuda.synchronize(dev)
        record.update(cuda_peak_allocated=torch.cuda.max_memory_allocated(dev),
                      cuda_peak_reserved=torch.cuda.max_memory_reserved(dev),
                      cuda_end_allocated=torch.cuda.memory_allocated(dev),
                      cuda_end_reserved=torch.cuda.memory_reserved(dev), cuda_device=_gpu_name(torch, dev))
        _state["run_peak_cuda"] = max(_state["run_peak_cuda"], record["cuda_peak_allocated"])
        _state["run_peak_cuda_reserved"] = max(_state["run_peak_cuda_reserved"], record["cuda_peak_reserved"])
        used = _nvml_used(torch, dev)
        if used is not None:
            record["nvml_used"] = used
        torch.cuda.reset_peak_memory_stats(dev)
    meter = _state["bytes"]
    if meter is not None:
        peak, end = meter.reset_window()
        record.update(peak_bytes=peak, end_bytes=end, pre_step_bytes=_state.pop("pre_bytes", None),
                      run_peak_bytes=meter.run_peak)
    if _state["rss_step"]:
        record["rss_hwm"] = _status_kib("VmHWM")
        _clear_hwm()
    now = time.perf_counter()
    record["seconds"] = now - _state["window_t"]
    _state["window_t"] = now
    _state["steps"] += 1
    _write(record)
    _state["window_t"] = time.perf_counter()   # the meter's own bookkeeping is not the program's time


def _gpu_name(torch, dev):
    try:
        return torch.cuda.get_device_name(dev)
    except Exception:  # noqa: BLE001
        return None


def _nvml_used(torch, dev):
    """NVML's used bytes of this process's GPU, found by UUID (None without pynvml or a UUID)."""
    if _state["nvml"] is False:
        return None
    try:
        if _state["nvml"] is None:
            import pynvml

            pynvml.nvmlInit()
            uuid = str(torch.cuda.get_device_properties(dev).uuid)
            uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
            _state["nvml"] = (pynvml, pynvml.nvmlDeviceGetHandleByUUID(uuid.encode()))
        pynvml, handle = _state["nvml"]
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    except Exception:  # noqa: BLE001 - no pynvml, no UUID: the metric is absent, never guessed
        _state["nvml"] = False
        return None


def _at_exit():
    torch = _state["torch"]
    record = {"kind": "end", "steps": _state["steps"], "wall": time.perf_counter() - (_state["t0"] or 0),
              "max_rss": _max_rss()}
    if torch is not None:
        meter = _state["bytes"]
        if meter is not None:
            record["run_peak_bytes"] = meter.run_peak
            record["storages_seen"] = meter.storages_seen
        try:
            if _cuda_ready(torch):
                dev = torch.cuda.current_device()
                record["cuda_run_peak_allocated"] = max(_state["run_peak_cuda"], torch.cuda.max_memory_allocated(dev))
                record["cuda_run_peak_reserved"] = max(_state["run_peak_cuda_reserved"],
                                                       torch.cuda.max_memory_reserved(dev))
            record["cuda_initialized"] = bool(_state["cuda"] and torch.cuda.is_initialized())
        except Exception:  # noqa: BLE001
            pass
    _write(record)


def _after_fork():
    """A forked child (a DataLoader worker, ``multiprocessing``): its own record, its own step count."""
    if _state["fd"] is not None:
        try:
            os.close(_state["fd"])
        except OSError:
            pass
    _state["fd"], _state["steps"] = None, 0
    _open_record({"forked": True})
    torch = _state["torch"]
    if torch is not None:
        _write({"kind": "torch", "version": torch.__version__, "forked": True,
                "device": "cuda" if _state["cuda"] else "cpu", "meter": None})
    _state["window_t"] = time.perf_counter()


def install():
    """Start recording this process (once); the torch hooks wait for ``import torch``."""
    if _state["installed"] or not os.environ.get(RECORDS_ENV):
        return
    _state["installed"] = True
    _open_record({})
    import atexit

    atexit.register(_at_exit)
    os.register_at_fork(after_in_child=_after_fork)
    if "torch" in sys.modules:
        _on_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder())
