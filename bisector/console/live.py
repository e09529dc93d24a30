"""Showing what bisector is doing (bisector.console.activity) while it does it.

On a terminal: a live region under the step lines (rich), one line per activity under way, with
a spinner, what it is, where it stands (the phase, a probe's last line, a clone's percentage) and
its elapsed time; the step lines print above it. Otherwise (CI logs, pipes): plain lines, only for
what takes long and says nothing else: a clone starting and ending, an environment being built.
"""
from __future__ import annotations

import re
import sys
import threading
import time
from typing import Callable, Optional, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from bisector.console import activity
from bisector.console.activity import Activity
from bisector.safety.safe_text import visible

BUILDING = ("creating the venv", "resolving/installing", "building the commit's wheel")
TORCH_BASE = ("creating the torch base venv", "installing torch==")   # a torch base: its own log line says what
FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class LiveProgress:
    """A rich live region of the activities under way (a terminal)."""

    def __init__(self, console: Console):
        self.console = console
        self._open: dict[int, Activity] = {}
        self._lock = threading.Lock()
        self._live = Live(self, console=console, refresh_per_second=8, transient=True, redirect_stderr=False)

    def __rich__(self) -> Group:
        with self._lock:
            rows = list(self._open.values())
        frame = FRAMES[int(time.monotonic() * 10) % len(FRAMES)]
        lines = []
        for act in rows:
            detail = f": {act.detail}" if act.detail else ""
            lines.append(Text(visible(f"{frame} {act.label}{detail}  {act.elapsed:.1f}s"), overflow="ellipsis",
                              no_wrap=True))
        return Group(*lines)

    def opened(self, act: Activity) -> None:
        with self._lock:
            self._open[act.id] = act

    def changed(self, act: Activity) -> None:
        pass  # the next refresh shows it

    def closed(self, act: Activity) -> None:
        with self._lock:
            self._open.pop(act.id, None)

    def print(self, text: str) -> None:
        """A finished line (a step, a note), above the live region."""
        self.console.print(visible(text), highlight=False, markup=False, soft_wrap=True)

    def __enter__(self) -> "LiveProgress":
        self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        self._live.stop()


_CELL = re.compile(r"\bcell (\d+)\s*/\s*(\d+)")


class PlainProgress:
    """Plain lines for a log: clones and environment builds (steps print themselves), and a heartbeat
    at least every ``heartbeat_s`` seconds while a probe runs ("probing accelerate 0.28.0: 20 s, cell 3
    of 8"); a clone is announced once it has run ``quiet_s`` seconds, so a quick one (or a failing
    one) adds nothing. ``clock`` is the time source (tests hand one in and call ``tick``)."""

    def __init__(self, stream: TextIO, quiet_s: float = 3.0, heartbeat_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.stream, self.quiet_s, self.heartbeat_s, self.clock = stream, quiet_s, heartbeat_s, clock
        self._said: set[int] = set()
        self._timers: dict[int, threading.Timer] = {}
        self._probing: dict[int, tuple[Activity, float, float]] = {}   # id -> (activity, since, last said)
        self._building: dict[int, tuple[Activity, float, float]] = {}  # the same, for a build (an env, a torch base)
        self._lock = threading.Lock()
        self._write = threading.Lock()   # one line at a time: two build threads never share a line
        self._stop = threading.Event()

    def print(self, text: str) -> None:
        with self._write:   # the line and its newline in one write (an activity's label quotes refs and probes)
            self.stream.write(visible(text) + "\n")
            self.stream.flush()

    def opened(self, act: Activity) -> None:
        if act.kind == "clone":
            timer = threading.Timer(self.quiet_s, self._announce, (act,))
            timer.daemon = True
            self._timers[act.id] = timer
            timer.start()

    def _announce(self, act: Activity) -> None:
        self._said.add(act.id)
        self.print(f"  {act.label} ...")

    def changed(self, act: Activity) -> None:
        building = act.kind in ("measure", "prefetch") and (act.detail in BUILDING
                                                            or (act.detail or "").startswith(TORCH_BASE))
        if building and act.id not in self._said and act.detail in BUILDING:
            self._said.add(act.id)
            what = act.label.removeprefix("prefetch ")
            self.print(f"  building the environment of {what}" + (" (prefetch)" if act.kind == "prefetch" else ""))
        if building:
            now = self.clock()
            with self._lock:
                self._building.setdefault(act.id, (act, now, now))
        if act.kind == "measure" and act.detail == "probe":
            now = self.clock()
            with self._lock:
                self._building.pop(act.id, None)
                self._probing[act.id] = (act, now, now)

    def tick(self) -> None:
        """Say how each probe and each build under way stands, once every ``heartbeat_s`` seconds of it
        (a torch base's pip install says nothing for a minute otherwise)."""
        now = self.clock()
        with self._lock:
            due = [(a, since) for a, since, last in self._probing.values() if now - last >= self.heartbeat_s]
            for a, since in due:
                self._probing[a.id] = (a, since, now)
            builds = [(a, since) for a, since, last in self._building.values() if now - last >= self.heartbeat_s]
            for a, since in builds:
                self._building[a.id] = (a, since, now)
        for act, since in builds:
            what = act.label.removeprefix("prefetch ")
            self.print(f"  building the environment of {what}: {now - since:.0f} s")
        for act, since in due:
            cell = _CELL.search(act.detail or "")
            where = f", cell {cell[1]} of {cell[2]}" if cell else ""
            self.print(f"  probing {act.label}: {now - since:.0f} s{where}")

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.heartbeat_s / 4)):
            self.tick()

    def closed(self, act: Activity) -> None:
        timer = self._timers.pop(act.id, None)
        if timer is not None:
            timer.cancel()
        if act.kind == "clone" and act.id in self._said:
            self.print(f"  {act.label}: {'failed' if act.failed else 'done'} after {act.elapsed:.0f}s")
        self._said.discard(act.id)
        with self._lock:
            self._probing.pop(act.id, None)
            self._building.pop(act.id, None)

    def __enter__(self) -> "PlainProgress":
        self._stop.clear()
        threading.Thread(target=self._beat, name="bisector-heartbeat", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()


def progress_for(stream: Optional[TextIO] = None):
    """The progress display for ``stream`` (stderr): live on a terminal, plain lines otherwise."""
    stream = stream or sys.stderr
    if stream.isatty():
        return LiveProgress(Console(file=stream, stderr=stream is sys.stderr))
    return PlainProgress(stream)


class showing:
    """``with showing(display):`` the display listens to bisector.console.activity for the block."""

    def __init__(self, display):
        self.display = display

    def __enter__(self) -> Callable[[str], None]:
        self.display.__enter__()
        activity.set_listener(self.display)
        return self.display.print

    def __exit__(self, *exc) -> None:
        activity.set_listener(None)
        self.display.__exit__(*exc)
