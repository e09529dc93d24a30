"""The env cache on disk: cheap readiness checks, disk accounting, safe removal.

Layout under the cache dir: ``envs/<dir name>/`` (ready envs, each with bisector-env.json),
``locks/``, ``tmp/`` (builds in progress), ``trash/`` (envs being removed), ``overlays/``,
``bases/``, ``wheels/<sha>/``.
"""
from __future__ import annotations

import enum
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Optional

from bisector.envs.backends import env_python, site_packages
from bisector.envs.info import EnvInfo, InterpreterStamp, read_info
from bisector.envs.overlay import COMPLETE, PTH_NAME


class State(enum.Enum):
    """What a quick look at an env dir says."""

    MISSING = "missing"      # no dir
    READY = "ready"          # everything in place, interpreter unchanged
    STALE = "stale"          # in place, but the interpreter changed: re-run the health check
    BROKEN = "broken"        # damaged or half-deleted: rebuild


def _required_paths(env_dir: Path, info: EnvInfo) -> list[Path]:
    paths = [env_dir / "pyvenv.cfg", env_dir / info.dist_info / "METADATA"]
    paths += [env_dir / p for p in info.import_paths]
    if info.overlay:
        paths += [Path(info.overlay) / COMPLETE, site_packages(env_dir) / PTH_NAME]
    return paths


def quick_check(env_dir: Path, fingerprint: str) -> tuple[State, Optional[EnvInfo]]:
    """Readiness from os.stat and the info file only (no subprocess)."""
    if not env_dir.exists():
        return State.MISSING, None
    info = read_info(env_dir)
    if info is None or info.fingerprint != fingerprint:
        return State.BROKEN, None
    try:
        if not all(p.exists() for p in _required_paths(env_dir, info)):
            return State.BROKEN, info
    except Exception:  # site-packages gone
        return State.BROKEN, info
    stamp = InterpreterStamp.of(env_python(env_dir))
    if stamp is None:
        return State.BROKEN, info
    return (State.READY if stamp == info.interpreter else State.STALE), info


def discard(path: Path, trash_dir: Path) -> None:
    """Remove a dir: first renamed into ``trash_dir`` (atomic), then deleted."""
    if not os.path.lexists(path):
        return
    trash_dir.mkdir(parents=True, exist_ok=True)
    doomed = Path(tempfile.mkdtemp(dir=trash_dir, prefix=path.name[:40] + "-"))
    try:
        os.rename(path, doomed / "x")
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(doomed, ignore_errors=True)


def sweep(dir_path: Path, older_than_s: float) -> None:
    """Delete entries of ``dir_path`` not modified for ``older_than_s`` seconds."""
    if not dir_path.is_dir():
        return
    cutoff = time.time() - older_than_s
    for entry in dir_path.iterdir():
        try:
            if entry.lstat().st_mtime < cutoff:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        except OSError:
            pass


def disk_usage(root: Path) -> tuple[int, int]:
    """(extra bytes, apparent bytes) of a tree.

    Extra = allocated blocks (st_blocks * 512) of every dir and of every file whose inode has
    st_nlink == 1, i.e. that only this tree holds; files hard-linked from uv's cache (or
    shared with other envs) count zero, each inode at most once. Apparent = sum of st_size.
    """
    extra = apparent = 0
    seen: set[tuple[int, int]] = set()
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                    extra += st.st_blocks * 512
                    continue
                apparent += st.st_size
                key = (st.st_dev, st.st_ino)
                if key not in seen and st.st_nlink == 1:
                    extra += st.st_blocks * 512
                seen.add(key)
    return extra, apparent
