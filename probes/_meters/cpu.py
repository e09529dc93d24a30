"""Exact, deterministic peak of live tensor storage bytes, seen through a TorchDispatchMode.

Every aten op that runs while the mode is active (forward, the autograd engine's backward,
optimizer kernels) passes its inputs and outputs through ``__torch_dispatch__``. Each
*untyped storage* is counted once (views and in-place results share it), from the moment it is
first seen until it is freed. Freeing is observed with ``weakref.finalize`` on the storage's
Python object where torch preserves that object for the storage's lifetime (torch >= 2.1), and
otherwise by sweeping C++ weak references (``StorageWeakRef``) after every op. The counting primitives
are ``tensor_bytes``'s, which the command meter uses too.

Given an observer of allocations (``allocations``), the meter tells it every storage's allocation, resize
and free, in order, with the measured step's window and phases, and its ``report()`` joins the cell's
facts: ga_memory's allocator model records the allocation trace so and replays it through its model of the
CUDA caching allocator (the cell's ``est_reserved_peak_bytes`` and ``est_allocated_peak_bytes``).
"""
from __future__ import annotations

import collections

import torch

from .phases import MeterBase
from .sites import site_of
from .tensor_bytes import PRE_EXISTING, LiveBytes


class StorageMeter(MeterBase, LiveBytes):
    """Counts live tensor-storage bytes on one device type; exact and deterministic.

    The count is ``tensor_bytes.LiveBytes``'s (each storage once, frees observed); this meter adds the
    measured window's phases (``phases.MeterBase``), sites and the allocation observer through its hooks.
    ``track(tensors)`` registers tensors that existed before the mode was entered (parameters,
    gradients, buffers, optimizer state); storages first seen as op inputs are registered too.
    With ``attribution=True`` every storage remembers the site that allocated it and the meter
    keeps a by-site breakdown of the bytes live at the window peak (``attribution()``). With
    ``allocations``, an observer (``alloc(key, nbytes)``, ``resize(key, nbytes)``, ``free(key)``,
    ``open_window()``, ``phase(name)``, ``close_window()`` and ``report()``, a dict the cell's record gets:
    ga_memory's ``_allocator_model.replay.AllocatorEstimate``), it tells the observer every allocation.
    """

    kind = "cpu-dispatch"

    def __init__(self, device_type="cpu", attribution=False, liveness="auto", allocations=None):
        self._sweeping = False
        MeterBase.__init__(self)
        LiveBytes.__init__(self, device_type, liveness)
        self.attribution_enabled = attribution
        self._sites = {}
        self._by_site = collections.Counter()
        self._peak_sites = {}
        self._phase_sites = {}
        self._sites_by_phase = {}
        self._created = collections.Counter()
        self._window_open = False
        self._snap_level = 0
        self._ppeak = 0
        self._allocations = allocations

    # --- MeterBase hooks -----------------------------------------------------------------
    @property
    def current(self) -> int:
        """Bytes live now (frees swept first: with polled liveness a ``del`` shows only after a sweep; a
        free reported by the sweep reads the count too, and does not sweep again)."""
        if not self._sweeping:
            self._sweeping = True
            try:
                self._live.sweep()
            finally:
                self._sweeping = False
        return self._count

    @current.setter
    def current(self, value: int) -> None:  # LiveBytes keeps the count through this
        self._count = value

    def _open_phase_peak(self):
        self._ppeak = self.current
        if self.attribution_enabled:
            self._phase_sites = self._live_sites()

    def _read_phase_peak(self):
        return self._ppeak

    def _phase_closed(self, name):
        if self.attribution_enabled:
            self._sites_by_phase[name] = self._phase_sites

    def reset_peak(self):
        self._sites_by_phase = {}
        self._created = collections.Counter()
        self._window_open = True
        MeterBase.reset_peak(self)
        self._snap_level = self.current
        self._peak_sites = dict(self._by_site)
        if self._allocations is not None:
            self._allocations.open_window()

    def mark(self, name):
        MeterBase.mark(self, name)
        if name is None:
            self._window_open = False
        if self._allocations is not None and name is None:
            self._allocations.close_window()
        elif self._allocations is not None:
            self._allocations.phase(name)

    def extra(self):
        out = {"liveness": self._live.name, "storages_seen": self.storages_seen,
               "dtype_bytes": dict(sorted(self._created.items()))}
        if self._allocations is not None:
            out.update(self._allocations.report())
        return out

    def _live_sites(self) -> dict:
        return {k: v for k, v in self._by_site.items() if v}

    # --- counting: LiveBytes's hooks --------------------------------------------------------
    def track(self, tensors, site=PRE_EXISTING):
        """Register already-existing tensors (iterable; None entries are skipped)."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                self._see(t, site)

    def _born(self, key, tensor, nbytes, site):
        label = site or (site_of(tensor) if self.attribution_enabled else "")
        self._sites[key] = label
        if self._window_open and site is None:  # created inside the window, by an op
            self._created[str(tensor.dtype).replace("torch.", "")] += nbytes
        if self._allocations is not None:
            self._allocations.alloc(key, nbytes)
        self._add(key, nbytes)

    def _grown(self, key, delta):
        if self._allocations is not None:
            self._allocations.resize(key, self._sizes[key] + delta)
        self._add(key, delta)

    def _add(self, key, delta):
        LiveBytes._add(self, key, delta)
        if self.attribution_enabled:
            self._by_site[self._sites[key]] += delta
        if self.current > self._ppeak:
            self._ppeak = self.current
            if self.attribution_enabled:
                self._phase_sites = self._live_sites()
                if self.current > self._snap_level:
                    self._snap_level = self.current
                    self._peak_sites = self._phase_sites

    def _freed(self, key):
        if self._allocations is not None:
            self._allocations.free(key)
        nbytes = self._sizes.get(key, 0)
        label = self._sites.pop(key, "")
        was, self._sweeping = self._sweeping, True   # called by a sweep: reading the count must not sweep
        try:
            LiveBytes._freed(self, key)
        finally:
            self._sweeping = was
        if self.attribution_enabled:
            self._by_site[label] -= nbytes

    # --- results ---------------------------------------------------------------------------
    def attribution(self, top=12):
        """Bytes live at the window peak by allocation site, largest first (top N + rest)."""
        return _rows(self._peak_sites, top)

    def phase_attribution(self, top=12):
        """The same at each phase's own peak: {phase: rows} (empty without attribution)."""
        return {name: _rows(sites, top) for name, sites in self._sites_by_phase.items()}

    def close(self):
        """Stop observing frees (detach finalizers); the meter's numbers stay readable."""
        self._live.close()


def _rows(sites: dict, top: int) -> list:
    """{site: bytes} as rows, largest first: the top N sites and one row for the rest."""
    items = sorted(sites.items(), key=lambda kv: (-kv[1], kv[0]))
    rows = [{"site": k, "bytes": v} for k, v in items[:top]]
    rest = sum(v for _, v in items[top:])
    if rest:
        rows.append({"site": f"({len(items) - top} other sites)", "bytes": rest})
    return rows
