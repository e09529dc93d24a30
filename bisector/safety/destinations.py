"""Destinations that would destroy data are refused, in one line, before any work.

Every path a command writes to (``report --repro FILE``, ``matrix --out/--html/--issues DIR`` and the files it
writes there, the reports next to the store) is asked :func:`refuse_destroying` first. It is refused
(:class:`~bisector.errors.UsageError`, exit 2) when it

* is the store or one of its own files (``-wal``, ``-shm``, ``-journal``, ``.init.lock``), by name or by
  being the same file under another name (a link); or any SQLite database;
* is the environment cache, or lies inside it (but the reports a store in the cache keeps beside it);
* is a file bisector did not write: every file bisector writes carries the mark :data:`MARK` (an extended
  attribute, set by bisector.safety.safe_write.write_atomic); a file without it is bisector's only when its
  first 64 KiB say so (:data:`SIGNS`: what it wrote before it marked its files, and on a filesystem that keeps
  no extended attributes). A user's ``train.py`` or ``README.md`` is never written over.

A file destination named with a trailing slash (``--repro out/``) names a directory: refused as one (a
directory is no file), and a missing one is an error, never a file of the directory's name.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from bisector.errors import UsageError

MARK = "user.bisector.written"
STORE_FILES = ("", "-wal", "-shm", "-journal", ".init.lock")   # the store and SQLite's and bisector's files beside it
SQLITE_HEADER = b"SQLite format 3\x00"
LOOK_BYTES = 64 << 10
# what a file bisector wrote says in its first 64 KiB: its name (reports, drafts, repro, JSON), a matrix page's
# title (matrix.md, index.html), a matrix plot's maker (matplotlib, whose PNG names itself)
SIGNS = (b"bisector", b"version matrix: ", b"\x89png\r\n\x1a\n")


@dataclass(frozen=True)
class Protected:
    """What no output may be: the store (and its own files) and the environment cache."""

    store: Optional[Path] = None
    cache: Optional[Path] = None

    def why(self, path: Path, directory: bool = False) -> Optional[str]:
        """Why writing ``path`` (a directory: ``directory``) would destroy data; None when it would not."""
        real = _real(path)
        if self.store is not None:
            for suffix in STORE_FILES:
                own = Path(f"{self.store}{suffix}")
                if real == _real(own) or _same_file(path, own):
                    return f"is the store {self.store}" + (f"'s own file {own.name}" if suffix else "")
        if self.cache is not None:
            cache = _real(self.cache)
            reports = _real(self.store).parent / "reports" if self.store is not None else None
            inside = real == cache or cache in real.parents
            if inside and not (reports is not None and (real == reports or reports in real.parents)):
                return f"is {'' if real == cache else 'in '}the environment cache {self.cache}"
        return None


def _real(path: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(path)))


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def written_by_bisector(path: Path) -> bool:
    """Whether the regular file ``path`` is one bisector wrote (see the module)."""
    try:
        if os.getxattr(path, MARK, follow_symlinks=False):
            return True
    except OSError:
        pass   # no mark, or a filesystem without extended attributes: what the file says
    try:
        with open(path, "rb") as fh:
            head = fh.read(LOOK_BYTES)
    except OSError:
        return False
    if head.startswith(SQLITE_HEADER):
        return False
    low = head.lower()
    return any(sign in low for sign in SIGNS[:2]) or (low.startswith(SIGNS[2]) and b"matplotlib" in low)


def mark_written(path: Union[str, Path]) -> None:
    """Mark ``path`` as a file bisector wrote (nothing where the filesystem keeps no extended attributes)."""
    try:
        os.setxattr(path, MARK, b"1", follow_symlinks=False)
    except OSError:
        pass


def check_name_lengths(path: Union[str, Path], what: str) -> None:
    """Each part of ``path`` fits the filesystem's longest name (255 bytes on most) and the whole its longest
    path: a UsageError in one line (it was the OS's ``File name too long`` after the work, exit 1)."""
    text = os.fspath(path)
    parent = Path(text).expanduser().absolute()
    while not os.path.isdir(parent) and parent != parent.parent:   # (os.path: a name too long is just absent)
        parent = parent.parent
    try:
        longest, whole = os.pathconf(parent, "PC_NAME_MAX"), os.pathconf(parent, "PC_PATH_MAX")
    except (OSError, ValueError):
        longest, whole = 255, 4096
    for part in Path(text).parts:
        size = len(os.fsencode(part))
        if size > longest:
            raise UsageError(f"{what} {text}: a name of {size} bytes, longer than the {longest} this filesystem "
                             "allows: name a shorter one")
    if len(os.fsencode(str(Path(text).expanduser().absolute()))) >= whole:
        raise UsageError(f"{what} {text}: a path longer than the {whole} bytes this system allows")


def refuse_destroying(path: Union[str, Path], what: str, protected: Protected = Protected(),
                      directory: bool = False) -> Path:
    """``path`` (a file, or a ``directory`` bisector writes into) checked against what it must not destroy
    (see the module); a UsageError in one line; the path, a trailing slash read. Nothing is created."""
    raw = os.fspath(path)
    check_name_lengths(raw, what)
    target = Path(raw).expanduser()
    if not directory and raw.endswith(("/", os.sep)):
        if not target.is_dir():
            raise UsageError(f"{what} {raw}: no directory {target} (a trailing slash names a directory; "
                             "name the file to write)")
        raise UsageError(f"{what} {raw} is a directory: name a file")
    why = protected.why(target, directory)
    if why:
        raise UsageError(f"{what} {raw} {why}: an output never replaces it; name another "
                         f"{'directory' if directory else 'file'}")
    if directory:
        return target
    try:
        st = os.lstat(target)
    except OSError:
        return target   # nothing there (or refused by the shape checks that follow)
    if stat.S_ISREG(st.st_mode) and st.st_size and not written_by_bisector(target):
        raise UsageError(f"{what} {raw} is a file of yours, not one of bisector's outputs: move it away or name "
                         "another file (an output replaces only one of bisector's own)")
    return target
