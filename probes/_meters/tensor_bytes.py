"""Live tensor-storage bytes, counted exactly (torch and the stdlib only): the core of the meter library.

Shared by the built-in probes that count bytes on the CPU: ``ga_memory``'s phase meter
(``_meters/cpu.py``) and the command meter (``command/_inprocess.py``) that measures a user's
unchanged program. Every aten op that runs under a ``TorchDispatchMode`` passes its inputs and outputs
through ``__torch_dispatch__``; each *untyped storage* is counted once (views and in-place results share
it) from the moment it is first seen until it is freed. Frees are observed with ``weakref.finalize`` on
the storage's Python object where torch preserves that object for the storage's life (torch >= 2.1),
otherwise by sweeping C++ weak references after every op.
"""
from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

PRE_EXISTING = "pre-existing"   # the site of a storage first seen as an op's input: it existed before


def storage_of(tensor):
    """The tensor's untyped storage, or None (sparse, meta, functional wrappers...)."""
    try:
        getter = getattr(tensor, "untyped_storage", None)
        return getter() if getter is not None else tensor.storage().untyped()
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def storage_objects_preserved() -> bool:
    """True when ``t.untyped_storage()`` returns one Python object for the storage's life."""
    t = torch.empty(1)
    try:
        return t.untyped_storage() is t.untyped_storage()
    except (AttributeError, RuntimeError):
        return False


class Finalizers:
    """Report frees through ``weakref.finalize`` on preserved storage objects."""

    name = "finalize"

    def __init__(self, on_free):
        self._on_free = on_free
        self._handles = {}

    def watch(self, key, storage):
        handle = weakref.finalize(storage, self._fired, key)
        handle.atexit = False   # nothing of the meter runs in the interpreter's exit: its storages die with it
        self._handles[key] = handle

    def _fired(self, key):
        if self._handles.pop(key, None) is not None:
            self._on_free(key)

    def sweep(self):
        pass

    def close(self):
        for handle in self._handles.values():
            handle.detach()
        self._handles.clear()


class Sweeper:
    """Report frees by polling C++ weak references to the storages (older torch)."""

    name = "sweep"

    def __init__(self, on_free):
        from torch.multiprocessing.reductions import StorageWeakRef

        self._ref = StorageWeakRef
        self._on_free = on_free
        self._refs = {}

    def watch(self, key, storage):
        self._refs[key] = self._ref(storage)

    def sweep(self):
        dead = [key for key, ref in self._refs.items() if ref.expired()]
        for key in dead:
            del self._refs[key]
            self._on_free(key)

    def close(self):
        self._refs.clear()


def liveness(kind, on_free):
    """The free observer: ``finalize``, ``sweep`` or ``auto`` (finalize where torch allows it)."""
    if kind == "auto":
        kind = "finalize" if storage_objects_preserved() else "sweep"
    return (Finalizers if kind == "finalize" else Sweeper)(on_free)


def tensors_in(obj) -> list:
    """The tensors in an op's arguments or outputs (nested tuples, lists and dicts), in order.

    What ``tree_flatten`` returns for the shapes aten ops use, at a fraction of its cost per op.
    """
    if isinstance(obj, torch.Tensor):
        return [obj]
    out = []
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            out.append(item)
        elif isinstance(item, (tuple, list)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return out


class LiveBytes(TorchDispatchMode):
    """Live storage bytes on one device type, with the whole-run peak and the peak of the open window.

    ``reset_window()`` closes the window (returns its peak and the bytes live at its end) and opens the
    next at the current level. Nothing here allocates a tensor or changes what an op computes.
    """

    kind = "cpu-dispatch"

    def __init__(self, device_type="cpu", liveness_kind="auto"):
        super().__init__()
        self.device_type = device_type
        self._live = liveness(liveness_kind, self._freed)
        self._sizes = {}
        self.current = 0
        self.run_peak = 0
        self.window_peak = 0
        self.storages_seen = 0

    def _see(self, tensor, site=None):
        """Count ``tensor``'s storage if it is new or resized; ``site``: PRE_EXISTING for an op's input."""
        if tensor.device.type != self.device_type:
            return
        storage = storage_of(tensor)
        if storage is None:
            return
        key = storage._cdata
        nbytes = storage.nbytes()
        old = self._sizes.get(key)
        if old is None:
            if nbytes == 0:
                return
            self._live.watch(key, storage)
            self.storages_seen += 1
            self._born(key, tensor, nbytes, site)
        elif old != nbytes:  # resized in place
            self._grown(key, nbytes - old)

    # hooks for a meter built on this one (``_meters/cpu.StorageMeter``: sites, an allocation observer)
    def _born(self, key, tensor, nbytes, site):
        self._add(key, nbytes)

    def _grown(self, key, delta):
        self._add(key, delta)

    def _add(self, key, delta):
        self._sizes[key] = self._sizes.get(key, 0) + delta
        self.current += delta
        if self.current > self.window_peak:
            self.window_peak = self.current
            self._window_peak_rose()
            if self.current > self.run_peak:
                self.run_peak = self.current

    def _window_peak_rose(self):
        """The open window's peak has just risen to ``current`` (``site_bytes.SiteBytes`` keeps its table then)."""

    def _freed(self, key):
        self.current -= self._sizes.pop(key, 0)

    def reset_window(self):
        """(peak of the window now closed, bytes live now); the next window opens at the current level."""
        self._live.sweep()
        closed = (self.window_peak, self.current)
        self.window_peak = self.current
        return closed

    def _see_all(self, tensors, site=None):
        """Each of an op's tensors (one call per op's inputs, ``site`` PRE_EXISTING, one per its outputs: a subclass
        that counts several threads' ops takes its lock here)."""
        for t in tensors:
            self._see(t, site)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self._see_all(tensors_in(args) + tensors_in(kwargs), PRE_EXISTING)
        out = func(*args, **kwargs)
        self._live.sweep()
        self._see_all(tensors_in(out))
        return out
