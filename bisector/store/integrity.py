"""Whether a store may be opened for writing: usable paths before anything is created, an integrity
check when it was not closed cleanly, and SQLite's failures said as what they mean (a damaged file, a
full disk) in one line, from every transaction.

Every process that has a store open for writing holds a shared ``flock`` on ``<store>.init.lock``. The
first one in (the only holder) sets the store up and, when the lock file does not say it was closed
cleanly at the size and modification time it has now, runs ``PRAGMA integrity_check`` (a process that
was killed, or a file changed behind bisector's back); the last one out writes the clean mark. A
damaged store is refused for writing with the way out: ``bisector store check|recover``.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from bisector.safety.destinations import check_name_lengths
from bisector.errors import BisectorError, UsageError
from bisector.paths import default_cache_dir, default_store_path

LOCK_SUFFIX = ".init.lock"
LOCK_WAIT_S = 120
SETTLE_S = 10
PROBLEMS_SHOWN = 3


def recovery_hint(path: Path) -> str:
    return (f"`bisector store check --store {path}` lists the damage, `bisector store recover --store {path}` "
            "copies every readable row into a new store")


def damaged(path: Path, problem: str) -> UsageError:
    """The one-line refusal of a damaged store."""
    return UsageError(f"store {path} is damaged ({problem}); {recovery_hint(path)}")


def integrity_problems(db: sqlite3.Connection) -> list[str]:
    """``PRAGMA integrity_check``'s findings (empty when the store is sound; SQLite's error when the
    file cannot even be checked)."""
    rows = [r[0] for r in db.execute("PRAGMA integrity_check(100)").fetchall()]
    return [] if rows == ["ok"] else rows


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_directory(path: Path, what: str) -> None:
    """``path`` is, or can be created as, a directory this process can write in (nothing is created)."""
    check_name_lengths(path, what)
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} {path} is not a directory")
    base = _nearest_existing(path.absolute())
    if not base.is_dir():
        raise UsageError(f"{what} {path}: {base} is not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        verb = "is" if base == path.absolute() else f"would be made in {base}, which is"
        raise UsageError(f"{what} {path} {verb} not writable")


def check_store_path(path: Path) -> None:
    """A store can be opened for writing at ``path`` (checked before anything is created)."""
    check_name_lengths(path, "store")
    path = Path(path).expanduser()
    if path.is_dir():
        raise UsageError(f"store {path} is a directory (--store names the SQLite file)")
    if path.exists():
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise UsageError(f"store {path} is in a read-only directory: runs, log and report can read it; "
                             "measuring needs a writable one (--store)")
        if not os.access(path, os.R_OK | os.W_OK):
            raise UsageError(f"store {path} is not readable and writable by this user")
        _check_is_a_store(path)
        return
    check_directory(path.parent, "store directory")


def empty_file(path: Path) -> bool:
    """A 0-byte file (``touch``, the ``sqlite3`` shell): an empty store, not a foreign file."""
    try:
        return path.is_file() and path.stat().st_size == 0
    except OSError:
        return False


def _check_is_a_store(path: Path) -> None:
    """An existing file is an SQLite database with bisector's tables (read only: nothing is written)."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            if db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:   # (none: being created right now)
                db.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        if "malformed" in str(exc):
            raise damaged(path, str(exc)) from None
        raise UsageError(f"store {path} is not a usable bisector store ({exc}); move it away or pass --store to "
                         "use another file") from None


def check_run_paths(store: Optional[Path], cache_dir: Optional[Path]) -> None:
    """The store (``--store``, else the default) and the cache directory of a command that measures."""
    check_store_path(store or default_store_path())
    check_directory(cache_dir or default_cache_dir(), "cache directory")


def settled_version(store: Path, read: Callable[[], Optional[tuple]]) -> Optional[tuple]:
    """``read()`` (the store's version row) for a reader that takes no lock: while another process is
    setting the store up (its lock file is there, the tables or the version row not yet), read again for up
    to ``SETTLE_S`` seconds, so that a store being created right now is not called unusable."""
    lock, deadline = Path(str(store) + LOCK_SUFFIX), time.monotonic() + SETTLE_S
    while True:
        try:
            row = read()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc) or not lock.exists() or time.monotonic() > deadline:
                raise
        else:
            if row is not None or not lock.exists() or time.monotonic() > deadline:
                return row
        time.sleep(0.05)


class OpenMark:
    """The shared lock of a store open for writing, and its clean-close mark (see the module)."""

    def __init__(self, store: Path):
        self.store, self.path = store, Path(str(store) + LOCK_SUFFIX)
        self.created = not self.path.exists()
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.first = False

    def enter(self) -> None:
        """Hold the lock: exclusively (``first``) when no other process has the store open, else shared."""
        self.first = self._try(fcntl.LOCK_EX)
        if not self.first:
            deadline = time.monotonic() + LOCK_WAIT_S
            while not self._try(fcntl.LOCK_SH):   # an opener setting the store up, or checking it
                if time.monotonic() > deadline:
                    raise BisectorError(f"store {self.store} stayed locked by another process for {LOCK_WAIT_S} s "
                                        f"(lock file {self.path})")
                time.sleep(0.05)

    def _try(self, how: int) -> bool:
        try:
            fcntl.flock(self.fd, how | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def closed_cleanly(self) -> bool:
        """The lock file's mark matches the store file as it is now."""
        os.lseek(self.fd, 0, os.SEEK_SET)
        return os.read(self.fd, 200).decode("ascii", "replace") == self._mark()

    def _mark(self) -> str:
        try:
            st = os.stat(self.store)
        except OSError:
            return "missing"
        return f"closed {st.st_size} {st.st_mtime_ns}"

    def _write(self, text: str) -> None:
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, text.encode(), 0)

    def opened(self) -> None:
        """The store is set up: mark it open (until the last one out closes it) and share the lock."""
        if self.first:
            self._write("open")
            fcntl.flock(self.fd, fcntl.LOCK_SH)

    def leave(self, db: Optional[sqlite3.Connection], clean: bool = True) -> None:
        """Close ``db``; the last one out marks the store closed cleanly (never after a failed open: a
        store refused as damaged stays marked for the check, and a lock file this open made goes again)."""
        last = self._try(fcntl.LOCK_EX)
        if db is not None:
            db.close()
        if last and clean:
            self._write(self._mark())
        elif last and self.created:
            self.path.unlink(missing_ok=True)
        os.close(self.fd)


def changed_since_closed(store: Path) -> bool:
    """For a reader (nothing is locked or written): whether the store is not as the last writer out left it:
    its clean-close mark names another size or time (the file was changed behind bisector's back), or there is
    no mark at all. A mark of ``open`` (a writer has it now, or was killed) says nothing to a reader."""
    try:
        mark = Path(str(store) + LOCK_SUFFIX).read_text("ascii", "replace")
        st = os.stat(store)
    except OSError:
        return True
    return mark.startswith("closed ") and mark != f"closed {st.st_size} {st.st_mtime_ns}"


def check_as_reader(db: sqlite3.Connection, store: Path) -> None:
    """A reader's check of a store opened read-only: when it changed since its last writer closed it
    (:func:`changed_since_closed`), ``PRAGMA integrity_check`` first, as a writer does; damage is one line."""
    if not store.stat().st_size or not changed_since_closed(store):
        return
    try:
        problems = integrity_problems(db)
    except sqlite3.DatabaseError as exc:
        problems = [str(exc)]
    if problems:
        raise damaged(store, problems[0])


class Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception (a kill never leaves a half row); a damaged
    file or a full disk is one line (see :func:`translated`)."""

    def __init__(self, db: sqlite3.Connection, lock: threading.RLock, path: Path):
        self.db, self.lock, self.path = db, lock, path

    def __enter__(self) -> sqlite3.Connection:
        self.lock.acquire()
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except BaseException as exc:
            self.lock.release()
            raise translated(exc, self.path) from None
        return self.db

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        except sqlite3.DatabaseError as failed:
            if exc is None:
                exc = failed
            with contextlib.suppress(sqlite3.DatabaseError):
                self.db.execute("ROLLBACK")   # (a COMMIT that failed leaves its transaction open)
        finally:
            self.lock.release()
        if exc is not None and translated(exc, self.path) is not exc:
            raise translated(exc, self.path) from None
        if exc is not None and exc_type is None:
            raise exc


def translated(exc: BaseException, path: Path) -> BaseException:
    """An SQLite error as what it means for the user: a damaged file, a full disk (one line each), or ``exc``."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return exc
    text = str(exc).lower()
    if any(word in text for word in ("malformed", "corrupt", "disk i/o error")):
        return damaged(path, str(exc))
    if "full" in text:
        return BisectorError(f"store {path}: {exc}: free some space and run the same command again (every "
                             "measurement finished before is stored)")
    return exc
