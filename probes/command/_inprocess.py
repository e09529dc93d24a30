"""The command meter's in-process half: one ``CommandMeter`` per Python process of a user's command (children,
launcher-started ranks and forked children too), loaded by the generated ``sitecustomize``; it does nothing
until ``torch`` is imported, then records each optimizer step.

A step is the time from the end of one ``optimizer.step()`` to the end of the next, as torch's global optimizer
hooks see them (the user's own loop, accelerate and ``transformers.Trainer`` all call ``optimizer.step()``).
The meter's lifecycle is its methods: ``install`` (its record file, its exit and fork handlers, the hook on
uncaught exceptions, the watch for torch: ``_torch_hook.py``), ``on_torch``, ``step_begin`` / ``step_end``,
``after_fork`` and ``at_exit``; what it measures is its parts (``_parts.py``: the exact CPU tensor bytes over
every thread, the CUDA allocator and NVML through ``_meters/cuda.py``, the step's peak RSS; and ``_numerics.py``:
the loss the step backpropagated, its gradient and update norms), attached once torch is imported; the first part
names the meter. Its records (``_records.py``) are JSON lines in a file of its
own per process: ``load`` when Python starts, ``torch`` when torch is imported, ``step`` after every step
(written at once: a killed or ``os._exit``-ing process keeps the steps it finished), ``error`` for an uncaught
exception (its traceback's last line), ``meter_error`` and ``end`` at exit. Nothing is printed; imports only
the standard library until torch is imported.
"""
import os
import sys
import time

from . import _records
from ._torch_hook import TorchWatch

METER_LIBRARY = ("_meters.site_bytes", "_meters.cuda", "_meters.fake_reads")   # the probes' meter library modules it loads by path
METER = None   # this process's meter, once installed


def _library(dotted):
    """A module of the probes' meter library (``METER_LIBRARY``, probes/_meters), loaded by path under a package
    name of its own: the program's ``sys.path`` and modules stay as they were."""
    import importlib
    import importlib.util

    package, _, module = dotted.partition(".")
    alias = "_bisector" + package
    if alias not in sys.modules:
        root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), package)
        spec = importlib.util.spec_from_file_location(alias, os.path.join(root, "__init__.py"),
                                                      submodule_search_locations=[root])
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[alias] = loaded
        spec.loader.exec_module(loaded)
    return importlib.import_module(f"{alias}.{module}")


def _max_rss():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class CommandMeter:
    """This process's meter: its record file, its lifecycle, and the parts that measure each step."""

    def __init__(self, directory, key, kind="tensors", device="auto", options=None):
        self.directory, self.key, self.kind, self.device_asked = directory, key, kind, device or "auto"
        self.options = dict(options or {})   # the probe's: "sites" (TensorBytes's), "fake"
        self.records = _records.RecordFile(directory, key, os.getpid())
        self.parts, self.torch, self.name, self.device = [], None, None, None
        self.steps, self.t0, self.started = 0, time.perf_counter(), None
        self._clock, self._lock, self.hooks, self._main = {}, None, None, None
        self.watch = TorchWatch(self.on_torch)

    # --- lifecycle ---------------------------------------------------------------------------------------
    def install(self) -> bool:
        """Start recording this process; the parts wait for ``import torch``. False: no record file here."""
        if not self.records.open():
            return False
        self.write(self._load_record())
        import atexit

        atexit.register(self.at_exit)   # the first registered: the last to run
        os.register_at_fork(after_in_child=self.after_fork)
        previous = sys.excepthook

        def excepthook(kind, value, tb):
            self.uncaught(kind, value, None)
            return previous(kind, value, tb)

        sys.excepthook = excepthook
        self.watch.arm()
        return True

    def on_torch(self, torch) -> None:
        """torch has been imported: attach the parts, write the ``torch`` record, hook optimizer steps."""
        try:
            self._start(torch)
        except Exception as exc:  # noqa: BLE001 - the meter never breaks the program; the record says why
            self.meter_error("start", exc)

    def _start(self, torch):
        import threading

        from . import _numerics, _parts

        self.torch, self._lock = torch, threading.Lock()
        self._hook_thread_errors(threading)
        self.device = "cpu" if self.options.get("fake") else self._device(torch)
        if self.options.get("fake") and self.kind == "tensors":   # --fake: the program runs on fake tensors
            from ._fake import FakeTensorBytes

            self.parts.append(FakeTensorBytes(_library("_meters.site_bytes"), _library("_meters.fake_reads"),
                                              self.options.get("sites")))
        elif self.device == "cuda":
            self.parts.append(_parts.CudaCounters(_library("_meters.cuda")))
        elif self.kind == "tensors":
            self.parts.append(_parts.TensorBytes(_library("_meters.site_bytes"), self.options.get("sites")))
        self.parts.append(_parts.RssPeak())
        self.parts += _numerics.parts_for(self)   # the program's numbers (loss, gradient norm): after the memory parts
        facts = {}
        for part in self.parts:
            facts.update(part.start(torch))
        self.name = self.parts[0].kind
        try:
            import torch.optim.optimizer as optim_base
        except ImportError:
            optim_base = None
        post = getattr(optim_base, "register_optimizer_step_post_hook", None)
        self.hooks = post is not None
        self.started = time.perf_counter()
        self.write(self._torch_record(facts))
        if post is not None:
            optim_base.register_optimizer_step_pre_hook(self.step_begin)
            post(self.step_end)

    def attach(self, part) -> None:
        """One more part (a per-step recorder of the program's numbers, say): started at once if torch is here."""
        self.parts.append(part)
        if self.torch is not None:
            self._guarded("start", part.start, self.torch)

    def step_begin(self, optimizer, args, kwargs) -> None:
        for part in self.parts:
            self._guarded("step_begin", part.step_begin, optimizer)

    def step_end(self, optimizer, args, kwargs) -> None:
        with self._lock:
            import _thread

            record = {"kind": "step", "i": self.steps}
            for part in self.parts:
                self._guarded("step_end", part.step_end, optimizer, record)
            me, now = _thread.get_ident(), time.perf_counter()
            record["seconds"] = now - self._clock.get(me, self.started)
            if me != self._main:
                record["thread"] = self._thread_name()
            self.steps += 1
            self.write(record)
            self._clock[me] = time.perf_counter()   # the meter's own bookkeeping is not the program's time

    def after_fork(self) -> None:
        """In a forked child (a DataLoader worker, ``multiprocessing``, ``os.fork``): a process of its own, with
        its own record file and step count (from the records directory the meter keeps, not the environment)."""
        try:
            inherited = self.records
            self.records = _records.RecordFile(self.directory, self.key, os.getpid())
            inherited.close_inherited()
            if not self.records.open():
                return
            self.steps, self.t0 = 0, time.perf_counter()
            self.write(self._load_record(forked=True))
            if self.torch is not None:
                import threading

                self._lock, self.started = threading.Lock(), time.perf_counter()
                self._clock = {}
                for part in self.parts:
                    self._guarded("after_fork", part.after_fork)
                self.write(self._torch_record({"forked": True}))
        except Exception:  # noqa: BLE001 - never the child's problem
            pass

    def at_exit(self) -> None:
        """The ``end`` record (counters only: no synchronisation, no collective, no NVML call), then each part
        stops: the dispatch mode is left and its free observers detached before the interpreter's teardown."""
        record = {"kind": "end", "steps": self.steps, "wall": time.perf_counter() - self.t0}
        try:
            record["max_rss"] = _max_rss()
        except Exception:  # noqa: BLE001
            pass
        for part in self.parts:
            self._guarded("end", part.end, record)
        self.write(record)
        for part in self.parts:
            self._guarded("stop", part.stop)

    # --- records -----------------------------------------------------------------------------------------
    def write(self, record) -> None:
        self.records.write(record)

    def meter_error(self, where, exc) -> None:
        self.write({"kind": "meter_error", "error": f"{where}: {type(exc).__name__}: {exc}"[:500]})

    def _guarded(self, where, call, *args):
        try:
            call(*args)
        except Exception as exc:  # noqa: BLE001 - a part's failure is recorded, never raised into the program
            self.meter_error(where, exc)

    def uncaught(self, kind, value, thread) -> None:
        """An exception nobody caught (the process's or a thread's): its traceback's last line, with the time."""
        try:
            import traceback

            line = traceback.format_exception_only(kind, value)[-1].strip()
            self.write({"kind": "error", "line": line[:1000], "t": time.time(), "thread": thread})
        except Exception:  # noqa: BLE001
            pass

    def _hook_thread_errors(self, threading):
        previous = threading.excepthook

        def excepthook(args):
            if args.exc_type is not SystemExit:
                self.uncaught(args.exc_type, args.exc_value, getattr(args.thread, "name", None))
            return previous(args)

        threading.excepthook = excepthook
        self._main = threading.main_thread().ident

    def _thread_name(self):
        import threading

        return threading.current_thread().name

    def _load_record(self, forked=False):
        return {"kind": "load", "pid": os.getpid(), "ppid": os.getppid(), "forked": forked, "t": time.time(),
                "argv": list(getattr(sys, "argv", [])[:4]), "executable": sys.executable, "prefix": sys.prefix,
                "rank": os.environ.get("RANK"), "local_rank": os.environ.get("LOCAL_RANK"),
                "world_size": os.environ.get("WORLD_SIZE")}

    def _torch_record(self, facts):
        torch = self.torch
        return {"kind": "torch", "version": torch.__version__,
                "git_version": getattr(torch.version, "git_version", None), "cuda_version": torch.version.cuda, "device": self.device, "meter_kind": self.kind, "meter": self.name,
                "threads": torch.get_num_threads(), "optimizer_hooks": self.hooks, "torch_seen": self.watch.how,
                **facts}

    def _device(self, torch):
        if self.device_asked == "auto":
            try:
                return "cuda" if torch.cuda.is_available() else "cpu"
            except Exception:  # noqa: BLE001 - a broken CUDA install measures on the CPU and says so
                return "cpu"
        return self.device_asked


def install(directory, key, kind="tensors", device="auto", options=None):
    """The generated ``sitecustomize``'s call: this process's meter (once), or None where it cannot record."""
    global METER
    if METER is None:
        meter = CommandMeter(directory, key, kind, device, options)
        if meter.install():
            METER = meter
    return METER
