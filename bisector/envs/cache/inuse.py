"""'In use' marks on environments, so ``envs gc`` never removes one a probe is running in.

A user of an environment holds a shared ``flock`` on ``<cache>/locks/<fingerprint>.use``
from before its readiness check until its probe ends; ``gc`` removes an environment only
while holding that lock exclusively, taken without waiting. Locks belong to open files,
so they vanish with the process that held them (a killed run leaves nothing stale).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def in_use(lock_path: Path) -> Iterator[None]:
    """Mark the environment as used (shared with other users) while the block runs."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while gc is removing the environment
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def unused(lock_path: Path) -> Iterator[bool]:
    """Yield True, holding the environment exclusively, when nobody uses it; else False at once."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def is_in_use(lock_path: Path) -> bool:
    """Whether some process holds the environment now (for listings; a snapshot, not a lock)."""
    if not lock_path.exists():
        return False
    with unused(lock_path) as free:
        return not free
