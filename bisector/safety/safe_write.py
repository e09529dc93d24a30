"""Files bisector writes, written safely: never through a symlink, never half-written.

:func:`write_atomic` writes to a temporary file in the destination's directory and renames it into
place (``os.replace``): a reader sees the old file or the new one, never a part; a symlink at the
destination is replaced by the file (the file it pointed at is never opened, its mode never changed);
a directory there is refused; the file is marked as bisector's (bisector.safety.destinations.MARK).
:func:`check_output_file` is what a command asks before any work about a file the user named (``--repro``):
the store, the cache or a file bisector did not write (bisector.safety.destinations), a symlink, a
directory, something that is not a regular file, a missing or unwritable directory are each one line
(:class:`~bisector.errors.UsageError`, exit 2); :func:`check_destinations` asks the same of the files a
command writes into a directory it was given (``--out``, ``--html``, ``--issues``).
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Optional, Union

from bisector.errors import UsageError
from bisector.safety.destinations import Protected, mark_written, refuse_destroying


def check_output_file(path: Union[str, Path], what: str, protected: Protected = Protected()) -> Path:
    """``path`` can be written as a regular file without destroying data (nothing is created); a UsageError
    saying why not. ``path`` as the user gave it: a trailing slash names a directory."""
    path = refuse_destroying(path, what, protected)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror or exc}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise UsageError(f"{what} {path} is a symlink: name the file itself (bisector writes through no link)")
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{what} {path} is a directory: name a file")
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{what} {path} is not a regular file")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise UsageError(f"{what} {path}: no directory {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {path}: the directory {parent} is not writable")
    if st is not None and not os.access(path, os.W_OK):
        raise UsageError(f"{what} {path} is not writable")
    return path


def _not_regular(path: Path) -> Optional[str]:
    """What ``path`` is when it is there and no regular file (None: a regular file, or nothing)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    return ("a symlink" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file")


def check_destinations(directory: Path, what: str, names: Iterable[str] = (), patterns: Iterable[str] = (),
                       protected: Protected = Protected()) -> None:
    """The files a command will write into ``directory`` (``--out``, ``--html``, ``--issues``): the directory is
    not the store or the cache, and each of ``names`` and every entry there now that matches one of
    ``patterns`` (names known only after the run: a draft's, a plot's) is a regular file bisector wrote, or
    absent; a directory, a symlink, a FIFO, the store, a file of the user's there is one line (UsageError, exit
    2) before any work, not a failure (or a loss) after the whole run. Nothing is created."""
    directory = refuse_destroying(directory, what, protected, directory=True)
    if not directory.is_dir():
        return   # made by the run (check_directory said it can be)
    found = {directory / name for name in names} | {p for pattern in patterns for p in directory.glob(pattern)}
    for path in sorted(found):
        kind = _not_regular(path)
        if kind:
            raise UsageError(f"{what} {directory}: {path.name} there is {kind}; bisector writes a regular file "
                             "in its place: move it away or name another directory")
        refuse_destroying(path, f"{what} {directory}:", protected)


def write_atomic(path: Path, data: Union[str, bytes], mode: Optional[int] = None) -> Path:
    """Write ``data`` to ``path`` through a temporary file in its directory renamed into place (see the
    module); ``mode``: the new file's permissions (default: 0o666 less the umask, as ``open`` gives)."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise IsADirectoryError(f"{path} is a directory")
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        mark_written(tmp)
        os.chmod(tmp, mode if mode is not None else 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def copy_atomic(source: Path, target: Path) -> Path:
    """``source``'s bytes written to ``target`` by :func:`write_atomic` (a link at ``target`` replaced)."""
    return write_atomic(target, Path(source).read_bytes())


def _umask() -> int:
    """The process's umask, read without setting it (``os.umask`` would, for every thread, a moment)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
