"""The allocation trace of one cell: every storage allocation and free, in order, with the phases of
the measured step. Pure Python; the CPU meter records it, the allocator model replays it.

Compact form (JSON): ``events`` is a list of integers, ``n > 0`` allocates ``n`` bytes (the k-th
allocation of the trace has id k), ``-(k + 1)`` frees allocation k, ``0`` empties the cache;
``window`` is ``[start, end]``, the event indices where the measured step begins and ends (a peak
is read from there, after the allocator state the warm-up left); ``phases`` is ``[[index, name], ...]``,
the measured step's phases by the index of their first event. Recording stops at ``limit`` events
(``truncated``: such a trace is not replayed) and when the window closes.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field

FORMAT = "alloc-trace/1"
MAX_EVENTS = 1_000_000   # per cell: 8 MB while recording


class TraceError(ValueError):
    """A trace that cannot be replayed (malformed, truncated, freeing what it never allocated)."""


@dataclass
class Trace:
    events: list
    window: tuple = (0, None)
    phases: list = field(default_factory=list)
    truncated: bool = False

    @property
    def window_end(self) -> int:
        return len(self.events) if self.window[1] is None else self.window[1]

    def to_json(self) -> dict:
        return {"format": FORMAT, "events": list(self.events), "window": [self.window[0], self.window_end],
                "phases": [list(p) for p in self.phases], "truncated": self.truncated}

    @classmethod
    def from_json(cls, data) -> "Trace":
        """A trace from its compact form, checked: TraceError says what is wrong."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise TraceError(f"not an allocation trace (format {FORMAT} expected)")
        events = data.get("events")
        if not isinstance(events, list) or not all(type(e) is int for e in events):
            raise TraceError("events must be a list of integers")
        window = data.get("window") or [0, len(events)]
        if (len(window) != 2 or not all(type(w) is int for w in window)
                or not 0 <= window[0] <= window[1] <= len(events)):
            raise TraceError(f"window {window} is not within the {len(events)} events")
        phases = data.get("phases") or []
        indices = [p[0] for p in phases if isinstance(p, list) and len(p) == 2 and type(p[0]) is int
                   and isinstance(p[1], str)]
        if len(indices) != len(phases) or indices != sorted(indices) or any(
                not window[0] <= i <= window[1] for i in indices):
            raise TraceError("phases must be [index, name] pairs, in order, within the window")
        return cls(events, tuple(window), [tuple(p) for p in phases], bool(data.get("truncated")))


class TraceRecorder:
    """Builds a ``Trace`` from storage keys: ``alloc(key, n)``, ``free(key)``, ``resize(key, n)``,
    ``open_window()`` / ``phase(name)`` / ``close_window()``."""

    def __init__(self, limit: int = MAX_EVENTS):
        self.limit = limit
        self._events = array("q")
        self._ids = {}
        self._allocs = 0
        self._window = (0, None)
        self._phases = []
        self._closed = self.truncated = False

    def _room(self) -> bool:
        if self._closed or self.truncated:
            return False
        if len(self._events) >= self.limit:
            self.truncated = True
            return False
        return True

    def alloc(self, key, nbytes: int) -> None:
        if nbytes > 0 and self._room():
            self._ids[key] = self._allocs
            self._allocs += 1
            self._events.append(nbytes)

    def free(self, key) -> None:
        k = self._ids.pop(key, None)
        if k is not None and self._room():
            self._events.append(-(k + 1))

    def resize(self, key, nbytes: int) -> None:
        """A storage resized in place: on CUDA a new block is taken and the old one freed."""
        old = self._ids.pop(key, None)
        self.alloc(key, nbytes)
        if old is not None and self._room():
            self._events.append(-(old + 1))

    def open_window(self) -> None:
        if not self._room():
            return
        self._window, self._phases = (len(self._events), None), []

    def phase(self, name: str) -> None:
        if self._room() and self._window[1] is None:
            self._phases.append((len(self._events), name))

    def close_window(self) -> None:
        if not self._closed and not self.truncated:
            self._window = (self._window[0], len(self._events))
            self._closed = True

    def trace(self) -> Trace:
        return Trace(self._events, self._window, list(self._phases), self.truncated)

    def __len__(self) -> int:
        return len(self._events)
