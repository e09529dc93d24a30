"""Live tensor bytes with the allocation sites of each window's peak, at a small cost (torch and the stdlib only):
the command meter's count in a user's program (``command/_parts.TensorBytes``).

``SiteBytes`` is ``tensor_bytes.LiveBytes`` (the same exact count) that also says where the bytes live at the
peak of each window (an optimizer step). Only a storage of at least ``min_bytes`` is placed (a stack walk by
``sites.SitePicker``: the frame inside the package under test, ``dtype [autograd node] | path:line func``);
the others are pooled as one row, ``smaller allocations``; a large storage first seen as an op's input (made
where the meter did not see it) is ``pre-existing``. The rows of a window sum to its peak, to the byte.

The cost per op stays that of ``LiveBytes`` plus two assignments when the peak rises: the table of placed
sites is shared with the peak's snapshot and copied only when a placed storage is born, resized or freed
after a new peak (copy on write), which is rare next to the ops that run.
"""
from __future__ import annotations

from .sites import SitePicker
from .tensor_bytes import PRE_EXISTING, LiveBytes

MIN_BYTES = 1 << 20   # the default: storages of 1 MiB and more are placed
TOP = 8               # rows a window keeps: the largest sites, then the rest in one row
SMALLER = "smaller allocations"
OTHERS = "other sites"


class SiteBytes(LiveBytes):
    """``LiveBytes`` and, for each closed window, ``window_sites``: the rows of the bytes live at its peak."""

    def __init__(self, device_type="cpu", liveness_kind="auto", min_bytes=MIN_BYTES, picker=None):
        self.min_bytes = max(1, int(min_bytes))
        self.picker = picker or SitePicker()
        self._site_of = {}        # storage key -> its site (placed storages and pre-existing ones)
        self._placed = {}         # site -> (bytes live, storages live): shared with the snapshot until changed
        self._placed_total = 0
        self._shape = {}          # site -> (bytes, "dtype shape") of the largest storage born there
        self._snap = (self._placed, 0)   # (placed sites, their total) at the open window's peak
        self.window_sites = []
        super().__init__(device_type, liveness_kind)

    def _own(self):
        if self._snap[0] is self._placed:   # the snapshot holds this table: change a copy
            self._placed = dict(self._placed)
        return self._placed

    def _place(self, key, site, delta, count):
        placed = self._own()
        nbytes, n = placed.get(site, (0, 0))
        nbytes, n = nbytes + delta, n + count
        if n > 0:
            placed[site] = (nbytes, n)
        else:
            placed.pop(site, None)
        self._placed_total += delta

    # LiveBytes's hooks
    def _born(self, key, tensor, nbytes, site):
        if nbytes >= self.min_bytes:
            if site != PRE_EXISTING:
                site = self.picker.site(tensor)
                if nbytes > self._shape.get(site, (0,))[0]:
                    shape = "x".join(str(n) for n in tensor.shape) or "scalar"
                    self._shape[site] = (nbytes, f"{str(tensor.dtype).replace('torch.', '')} {shape}")
            self._site_of[key] = site
            self._place(key, site, nbytes, 1)
        self._add(key, nbytes)

    def _grown(self, key, delta):
        site = self._site_of.get(key)
        if site is not None:
            self._place(key, site, delta, 0)
        self._add(key, delta)

    def _window_peak_rose(self):
        self._snap = (self._placed, self._placed_total)

    def _freed(self, key):
        site = self._site_of.pop(key, None)
        if site is not None:
            self._place(key, site, -self._sizes.get(key, 0), -1)
        LiveBytes._freed(self, key)

    def reset_window(self):
        """LiveBytes's (peak, end) of the window now closed; its sites go to ``window_sites``."""
        closed = LiveBytes.reset_window(self)
        self.window_sites = self.rows(*self._snap, closed[0])
        self.restart_window()
        return closed

    def restart_window(self):
        """The open window starts at the bytes live now (after a fork, say)."""
        self.window_peak = self.current
        self._snap = (self._placed, self._placed_total)

    def rows(self, placed, total, peak, top=TOP):
        """[[site, bytes, storages, largest]...] at a peak: the ``top`` largest sites, the rest of the placed ones
        in one row, and the storages below ``min_bytes`` in another; they sum to ``peak``."""
        items = sorted(((s, b, n) for s, (b, n) in placed.items() if b), key=lambda r: (-r[1], r[0]))
        out = [[s, b, n, self._shape.get(s, (0, None))[1]] for s, b, n in items[:top]]
        rest = items[top:]
        if rest:
            out.append([f"{OTHERS} ({len(rest)})", sum(r[1] for r in rest), sum(r[2] for r in rest), None])
        small = peak - total
        if small:
            out.append([f"{SMALLER} (< {_size(self.min_bytes)} each)", small, None, None])
        return out


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n /= 1024
    return f"{n:g} GiB"
