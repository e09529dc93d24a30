"""Phase bookkeeping shared by the probe's memory meters.

A meter measures one *window* (the steady-state optimizer step): ``reset_peak()`` opens it,
``mark(name)`` starts the next named phase (closing the previous one) and ``mark(None)``
closes the last phase. Each phase records the bytes live at its start and end and its peak.
Subclasses supply ``current`` (bytes live now, read through ``_now()``) and two hooks for the running phase peak.
"""
from __future__ import annotations

import contextlib

# The meter each device's cells must be measured with (a cell measured with another is an error)
DEVICE_METER = {"cpu": "cpu-dispatch", "cuda": "cuda"}


class MeterBase:
    """Common window / phase logic; subclasses implement the byte counting."""

    kind = "abstract"

    def __init__(self):
        self._phases = {}
        self._phase = None
        self._window_peak = 0
        self.start_bytes = 0
        self.end_bytes = None

    # --- hooks -------------------------------------------------------------------------
    def _now(self) -> int:
        """Bytes live now: the subclass's ``current`` (a property or, in ``cpu.StorageMeter``, the count
        ``tensor_bytes.LiveBytes`` keeps, read after a sweep of the frees)."""
        return self.current

    def _open_phase_peak(self) -> None:
        """Start tracking the peak of a new phase (from the current level)."""
        raise NotImplementedError

    def _read_phase_peak(self) -> int:
        """The peak since the last ``_open_phase_peak``."""
        raise NotImplementedError

    def extra(self) -> dict:
        """Meter-specific facts for the cell record."""
        return {}

    def _phase_closed(self, name: str) -> None:
        """Called when phase ``name`` closes (its record is final); for per-phase bookkeeping."""

    # --- window ------------------------------------------------------------------------
    def reset_peak(self) -> None:
        """Open a new measurement window at the current level."""
        self._phases = {}
        self._phase = None
        self.start_bytes = self._now()
        self._window_peak = self.start_bytes
        self.end_bytes = None
        self._open_phase_peak()

    @property
    def peak(self) -> int:
        """Peak bytes in the window so far (including the running phase); frozen once closed."""
        if self.end_bytes is not None:
            return self._window_peak
        return max(self._window_peak, self._read_phase_peak())

    def mark(self, name) -> None:
        """Close the running phase (if any) and start phase ``name`` (None: just close).

        What happens between ``reset_peak()`` and the first mark (in the Trainer loop: from
        ``on_step_begin`` to the first ``training_step``) belongs to the window too: its peak is
        kept, never dropped when the first phase opens.
        """
        now = self._now()
        if self._phase is not None:
            record = self._phases[self._phase]
            record["peak_bytes"] = max(self._read_phase_peak(), now, record["start_bytes"])
            record["end_bytes"] = now
            self._window_peak = max(self._window_peak, record["peak_bytes"])
            self._phase_closed(self._phase)
        elif self.end_bytes is None:  # the window is open and no phase ran yet
            self._window_peak = max(self._window_peak, self._read_phase_peak(), now)
        self._phase = None
        if name is None:
            self._window_peak = max(self._window_peak, self._read_phase_peak(), now)
            self.end_bytes = now
            return
        name = self._unique(name)
        self._phases[name] = {"start_bytes": now, "peak_bytes": now, "end_bytes": now}
        self._phase = name
        self._open_phase_peak()

    @contextlib.contextmanager
    def phase(self, name):
        """Context manager form of ``mark(name)`` ... ``mark(None)``."""
        self.mark(name)
        try:
            yield self
        finally:
            self.mark(None)

    def _unique(self, name: str) -> str:
        if name not in self._phases:
            return name
        i = 2
        while f"{name}#{i}" in self._phases:
            i += 1
        return f"{name}#{i}"

    # --- results -----------------------------------------------------------------------
    @property
    def phases(self) -> dict:
        """Closed and running phases, in order: name -> {start_bytes, peak_bytes, end_bytes}."""
        return {k: dict(v) for k, v in self._phases.items()}

    @property
    def peak_phase(self):
        """Name of the first phase whose peak equals the window peak (None without phases)."""
        peak = self.peak
        for name, rec in self._phases.items():
            if rec["peak_bytes"] >= peak:
                return name
        return None

    def report(self) -> dict:
        """The window as a plain dict for the cell record."""
        return {
            "peak_bytes": self.peak,
            "start_bytes": self.start_bytes,
            "end_bytes": self._now() if self.end_bytes is None else self.end_bytes,
            "peak_phase": self.peak_phase,
            "phases": self.phases,
            **self.extra(),
        }
