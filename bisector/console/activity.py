"""What bisector is doing right now, for live progress.

Lower layers (environment builds, probe runs, clones, prefetch) open an activity with
:func:`doing` and refine it with :func:`update` (the phase, a probe's last line, a clone's
percentage); one listener, installed by the command line, shows them (a live display on a terminal,
plain lines otherwise). Without a listener this costs nothing. Activities nest per thread: an
update goes to the calling thread's innermost one.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator, Optional, Protocol


@dataclass
class Activity:
    """One thing under way: what (``label``), where it stands (``detail``), since when."""

    id: int
    label: str
    kind: str
    detail: str = ""
    started: float = field(default_factory=time.monotonic)
    failed: bool = False

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


class Listener(Protocol):
    """Shows activities (the CLI's progress display)."""

    def opened(self, activity: Activity) -> None: ...
    def changed(self, activity: Activity) -> None: ...
    def closed(self, activity: Activity) -> None: ...


_listener: Optional[Listener] = None
_ids = itertools.count(1)
_local = threading.local()


def set_listener(listener: Optional[Listener]) -> None:
    """Install (or, with None, remove) the one listener."""
    global _listener
    _listener = listener


def _stack() -> list[Activity]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


@contextlib.contextmanager
def doing(label: str, kind: str = "work") -> Iterator[Optional[Activity]]:
    """An activity for the duration of the block (``kind``: env, probe, clone, prefetch, work)."""
    listener = _listener
    if listener is None:
        yield None
        return
    activity = Activity(next(_ids), label, kind)
    _stack().append(activity)
    listener.opened(activity)
    try:
        yield activity
    except BaseException:
        activity.failed = True
        raise
    finally:
        _stack().remove(activity)
        listener.closed(activity)


def update(detail: str) -> None:
    """Say where the calling thread's current activity stands."""
    listener, stack = _listener, _stack()
    if listener is None or not stack:
        return
    activity = stack[-1]
    text = " ".join(detail.split())[:160]
    if text and text != activity.detail:
        activity.detail = text
        listener.changed(activity)


def line_updater():
    """A callback for a child's output lines that updates the current activity (None without a listener).

    The activity is captured here, in the calling thread, so the reader thread updates that one."""
    stack = _stack()
    if _listener is None or not stack:
        return None
    activity, listener = stack[-1], _listener

    def seen(line: str) -> None:
        text = " ".join(line.split())[:160]
        if text and text != activity.detail:
            activity.detail = text
            listener.changed(activity)

    return seen
