"""The parts of the command meter: each measures one thing per optimizer step (loaded once torch is imported).

A part is an object with these methods; the meter (``_inprocess.CommandMeter``) calls each of them guarded (an
exception becomes a ``meter_error`` record, never the program's) and in the order the parts were attached:

* ``start(torch) -> dict``: once torch is imported; facts for the ``torch`` record;
* ``step_begin(optimizer)``: in torch's global optimizer pre-step hook, on the thread that steps;
* ``step_end(optimizer, record)``: in the post-step hook: add fields to the ``step`` record;
* ``end(record)``: at exit (the meter's atexit handler, the last to run): add fields to the ``end`` record;
* ``after_fork()``: in a forked child, which is measured as a process of its own from there on;
* ``stop()``: after the ``end`` record: leave nothing of the part active for the interpreter's teardown.

``kind`` of the first part names the meter (``cpu-dispatch``, ``cuda``, ``rss``). A per-step recorder of the
program's numbers (loss, gradient norm) is one more part: ``CommandMeter.attach(part)``.
"""
import os
import threading


class Part:
    """A part that measures nothing: the base of the others (every method optional)."""

    kind = None

    def start(self, torch) -> dict:
        return {}

    def step_begin(self, optimizer) -> None:
        pass

    def step_end(self, optimizer, record) -> None:
        pass

    def end(self, record) -> None:
        pass

    def after_fork(self) -> None:
        pass

    def stop(self) -> None:
        pass


def _shared(live_bytes):
    """``LiveBytes`` with its bookkeeping under a lock: one count of every thread's tensors."""

    class SharedLiveBytes(live_bytes):
        def __init__(self, device_type, **options):
            self.lock = threading.RLock()   # before the base class: its free observer calls _freed
            self.closed = False
            super().__init__(device_type, **options)

        def _see_all(self, tensors, site=None):
            with self.lock:
                if not self.closed:
                    for tensor in tensors:
                        self._see(tensor, site)

        def _freed(self, key):
            with self.lock:
                super()._freed(key)

        def reset_window(self):
            with self.lock:
                return super().reset_window()

    return SharedLiveBytes


class TensorBytes(Part):
    """Live CPU tensor-storage bytes, exact (``_meters.site_bytes.SiteBytes``: ``tensor_bytes.LiveBytes``'s count),
    over every thread, with the allocation sites of each step's peak.

    A dispatch mode is per thread: it is entered in the thread that imports torch and, first thing, in every
    ``threading.Thread`` started after that; a thread already running then (or started outside ``threading``)
    is counted from its first optimizer step on, and that step says it was not (``uncounted``).

    ``sites`` (the meter's options): ``package_dirs`` (where the package under test lives: its frames place an
    allocation), ``min_bytes`` (smaller storages are pooled, never placed). A step's record carries its peak's
    ``sites`` rows when they differ from the last step's that did (a step without them has the same rows).
    """

    def __init__(self, library, sites=None):
        self._library, self._sites = library, dict(sites or {})

    def _counted(self):
        """The class that counts (``SiteBytes``; fake mode's mixes its value reads in)."""
        return self._library.SiteBytes

    def _counter(self):
        library, sites = self._library, self._sites
        skip = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]   # the probes: the meter's own frames
        picker = library.SitePicker(sites.get("package_dirs") or (), skip)
        return _shared(self._counted())("cpu", min_bytes=sites.get("min_bytes") or library.MIN_BYTES, picker=picker)

    def start(self, torch):
        self.counter, self._last_sites = self._counter(), None
        self.kind = self.counter.kind
        self._local = threading.local()
        self._enter()
        bootstrap = getattr(threading.Thread, "_bootstrap_inner", None)
        if bootstrap is not None:
            part = self

            def _bootstrap_inner(thread):
                part._enter()
                return bootstrap(thread)

            threading.Thread._bootstrap_inner = _bootstrap_inner
        return {"thread_counting": "new threads" if bootstrap is not None else "from each thread's first step"}

    def _enter(self):
        try:
            if not getattr(self._local, "counted", False) and not self.counter.closed:
                self.counter.__enter__()
                self._local.counted = True
        except Exception:  # noqa: BLE001 - the thread runs as it would; its steps say they were not counted
            pass

    def step_begin(self, optimizer):
        local = self._local
        if not getattr(local, "counted", False):
            local.late = threading.current_thread().name
            self._enter()
        local.pre = self.counter.current

    def step_end(self, optimizer, record):
        local = self._local
        peak, end = self.counter.reset_window()
        record.update(peak_bytes=peak, end_bytes=end, pre_step_bytes=getattr(local, "pre", None),
                      run_peak_bytes=self.counter.run_peak)
        sites = self.counter.window_sites
        if sites != self._last_sites:
            record["sites"] = self._last_sites = sites
        local.pre = None
        late = getattr(local, "late", None)
        if late is not None:
            record["uncounted"] = f"thread {late!r} ran tensor ops the meter could not see before this step"
            local.late = None

    def end(self, record):
        record.update(run_peak_bytes=self.counter.run_peak, storages_seen=self.counter.storages_seen)

    def after_fork(self):
        counter = self.counter
        counter.lock = threading.RLock()   # another thread may have held it at the fork
        counter.run_peak = counter.current   # the child's own run starts here
        counter.restart_window()
        self._last_sites = None

    def stop(self):
        counter = self.counter
        counter.closed = True
        try:
            from torch.utils._python_dispatch import _get_current_dispatch_mode

            if getattr(self._local, "counted", False) and _get_current_dispatch_mode() is counter:
                counter.__exit__(None, None, None)   # no Python dispatch of ours during the teardown
        except Exception:  # noqa: BLE001
            pass
        with counter.lock:
            counter._live.close()   # and no free observer of ours either


class CudaCounters(Part):
    """The CUDA caching allocator's counters per step and NVML's used bytes of the process's GPU (by UUID,
    ``GPU-`` or ``MIG-``), through ``_meters.cuda``; nothing until the program initialises CUDA."""

    def __init__(self, library, nvml="auto"):
        self._library, self._nvml_module = library, nvml   # nvml: the pynvml module ("auto": import it)
        self.kind = library.CudaMeter.kind

    def start(self, torch):
        self.torch, self.run_peak, self.run_reserved = torch, 0, 0
        self.nvml, self._names, self._carried = None, {}, {}
        return {}

    def carry(self, peaks):
        """Peaks the step's window reached before another part reset the counters (after its own reads, freed):
        this step's peaks are at least these."""
        for name, value in peaks.items():
            self._carried[name] = max(self._carried.get(name, 0), value)

    def _ready(self):
        return self.torch.cuda.is_initialized()

    def step_end(self, optimizer, record):
        if not self._ready():
            return
        cuda = self.torch.cuda
        dev = cuda.current_device()
        counters = self._library.window_counters(cuda, dev)
        for name, value in self._carried.items():
            counters[name] = max(counters[name], value)
        self._carried = {}
        record.update({f"cuda_{k}": v for k, v in counters.items()})
        self.run_peak = max(self.run_peak, counters["peak_allocated"])
        self.run_reserved = max(self.run_reserved, counters["peak_reserved"])
        if dev not in self._names:
            self._names[dev] = cuda.get_device_name(dev)
        record["cuda_device"] = self._names[dev]
        if self.nvml is None:
            uuid = getattr(cuda.get_device_properties(dev), "uuid", None)
            self.nvml = self._library.NvmlProbe(uuid=str(uuid) if uuid is not None else None, nvml=self._nvml_module)
        used = self.nvml.used_bytes()
        if used is not None:
            record["nvml_used"] = used

    def end(self, record):
        ready = self._ready()
        record["cuda_initialized"] = ready
        if ready:   # counters only: no synchronisation, nothing that could wait on the program's teardown
            dev = self.torch.cuda.current_device()
            record["cuda_run_peak_allocated"] = max(self.run_peak, int(self.torch.cuda.max_memory_allocated(dev)))
            record["cuda_run_peak_reserved"] = max(self.run_reserved, int(self.torch.cuda.max_memory_reserved(dev)))
        if self.nvml is not None and self.nvml.unavailable:
            record["nvml_unavailable"] = self.nvml.unavailable

    def after_fork(self):
        self.nvml = None   # NVML again in the child, if it ever uses CUDA (it cannot once its parent did)


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


class RssPeak(Part):
    """The peak resident set of each step (``VmHWM`` after ``clear_refs``), where the kernel allows it."""

    kind = "rss"

    def start(self, torch):
        self.per_step = _clear_hwm()
        return {"rss_scope": "step" if self.per_step else "run"}

    def step_end(self, optimizer, record):
        if self.per_step:
            record["rss_hwm"] = _status_kib("VmHWM")
            _clear_hwm()

    def after_fork(self):
        self.per_step = _clear_hwm()
