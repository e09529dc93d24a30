"""File-system operations of the cache: safe removal, sweeping old leftovers, disk accounting."""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from pathlib import Path


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
