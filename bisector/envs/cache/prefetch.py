"""Background building of what the bisect will likely need next (one at a time): environments
(items are Recipes) or torch bases (items are EnvSpecs with a ``torch==X`` base).

``submit`` replaces the pending queue (the newest midpoints matter most); a single daemon
worker builds them in order. ``claim`` is called by ``ensure`` first: a pending item is
taken back (the caller builds it), an in-flight one is waited for, and a prefetch failure
for it is re-raised once, so nothing is built twice.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any, Callable, Optional

from bisector.console import activity
from bisector.envs.tooling.tool_runs import log
from bisector.errors import EnvironmentFailure


class Prefetcher:
    """A bounded queue of items and one worker thread calling ``build(item)``; ``key(item)`` names
    an item (a recipe's fingerprint by default)."""

    def __init__(self, build: Callable[[Any], object], max_pending: int = 8,
                 key: Callable[[Any], str] = lambda recipe: recipe.fingerprint,
                 label: Optional[Callable[[Any], str]] = None):
        self._build, self._key, self._label = build, key, label or key
        self._max = max_pending
        self._cond = threading.Condition()
        self._pending: list[Any] = []
        self._running: Optional[tuple[str, Future]] = None
        self._failures: dict[str, EnvironmentFailure] = {}
        self._worker: Optional[threading.Thread] = None

    def submit(self, recipes: list[Any]) -> None:
        """Replace the queue with ``recipes`` (deduplicated by key, at most ``max_pending``)."""
        with self._cond:
            running = self._running[0] if self._running else None
            seen, queue = {running}, []
            for recipe in recipes:
                if self._key(recipe) not in seen:
                    seen.add(self._key(recipe))
                    queue.append(recipe)
            self._pending = queue[: self._max]
            if self._pending and (self._worker is None or not self._worker.is_alive()):
                self._worker = threading.Thread(target=self._loop, name="bisector-prefetch", daemon=True)
                self._worker.start()

    def claim(self, key: str) -> None:
        """Before building the item ``key`` names yourself: unqueue it or wait for the worker's build."""
        with self._cond:
            self._pending = [r for r in self._pending if self._key(r) != key]
            running = self._running if self._running and self._running[0] == key else None
        if running:
            try:
                running[1].result()
            except Exception:  # noqa: BLE001 - a failure is looked up below or rebuilt by the caller
                pass
        with self._cond:
            failure = self._failures.pop(key, None)
        if failure is not None:
            raise failure

    def wait_idle(self, timeout: Optional[float] = None) -> bool:
        """Block until the queue is empty and nothing is being built."""
        with self._cond:
            return self._cond.wait_for(lambda: not (self._pending or self._running), timeout)

    def _next(self) -> Optional[tuple[Any, Future]]:
        with self._cond:
            if not self._pending:
                self._running = None
                self._cond.notify_all()
                return None
            recipe = self._pending.pop(0)
            self._running = (self._key(recipe), Future())
            return recipe, self._running[1]

    def _loop(self) -> None:
        while (job := self._next()) is not None:
            recipe, future = job
            try:
                with activity.doing(f"prefetch {self._label(recipe)}", kind="prefetch"):
                    self._build(recipe)
                future.set_result(None)
            except EnvironmentFailure as exc:
                with self._cond:
                    self._failures[self._key(recipe)] = exc
                future.set_exception(exc)
            except BaseException as exc:  # never let the worker die silently
                log.warning("prefetch of %s failed: %s", self._key(recipe), exc)
                future.set_exception(exc)
