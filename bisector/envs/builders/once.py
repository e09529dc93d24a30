"""Build a cached thing exactly once, across threads and processes, and never expose half of it.

Used for commit wheels, base overlays, torch base venvs and candidate environments alike.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Optional, TypeVar

from filelock import FileLock, Timeout

from bisector.envs.tooling.fsops import discard
from bisector.envs.model.layout import CacheLayout
from bisector.errors import EnvironmentFailure

T = TypeVar("T")


def build_once(layout: CacheLayout, key: str, dest: Path, ready: Callable[[], Optional[T]],
               build: Callable[[Path], None], timeout: float = -1) -> T:
    """``ready()``, or ``dest`` built by ``build`` once and then ``ready()``.

    ``ready()`` returns the finished thing or None. It is asked without a lock first; when it says
    None, ``<locks>/<key>.lock`` is taken and it is asked again (another process may have built it
    meanwhile). Then what a failed build left at ``dest`` is discarded and ``build(staging)`` fills
    ``staging`` (which does not exist yet; its parent is a private scratch dir ``build`` may use),
    which is renamed to ``dest``: ``dest`` only ever appears complete. The scratch dir is removed
    whatever happens. Waiting longer than ``timeout`` seconds (-1: forever) for another builder
    is an EnvironmentFailure.
    """
    found = ready()
    if found is not None:
        return found
    for path in (layout.locks, layout.tmp):
        path.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(layout.lock(key)), timeout=timeout):
            found = ready()
            if found is None:
                _build(layout, dest, build)
                found = ready()
    except Timeout:
        raise EnvironmentFailure(f"timed out waiting for another build of {dest.name}") from None
    if found is None:
        raise EnvironmentFailure(f"{dest.name} was built but is not usable")
    return found


def _build(layout: CacheLayout, dest: Path, build: Callable[[Path], None]) -> None:
    """Build into a scratch dir and rename into place; a file-system error is an EnvironmentFailure."""
    try:
        discard(dest, layout.trash)
        scratch = Path(tempfile.mkdtemp(dir=layout.tmp, prefix=f"{dest.name[:60]}-"))
    except OSError as exc:
        raise EnvironmentFailure(f"building {dest.name}: {exc}") from exc
    try:
        build(scratch / "staging")
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(scratch / "staging", dest)
    except OSError as exc:
        raise EnvironmentFailure(f"building {dest.name}: {exc}") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
