"""The SQLite store of runs, measurements and step logs. Every write is one transaction.

WAL mode with a busy timeout lets several bisector processes share one store.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
import threading
import weakref
from pathlib import Path
from typing import Callable, Optional

from bisector.core.measurement import Measurement
from bisector.errors import BisectorError, UsageError
from bisector.store.blobs import externalized
from bisector.store.integrity import (OpenMark, Transaction, check_as_reader, check_store_path, damaged, empty_file,
                                      integrity_problems, settled_version, translated)
from bisector.store.records import (RUN_COLUMNS, RunKind, RunRow, RunState, StepRow, clean, clean_json,  # noqa: F401
                                    damaged_rows, measurement_from, run_columns, run_from, step_from, tell)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS measurements (
    key TEXT PRIMARY KEY, package TEXT NOT NULL, candidate TEXT NOT NULL,
    env_fingerprint TEXT NOT NULL, probe_fingerprint TEXT NOT NULL, repeat INTEGER NOT NULL,
    status TEXT NOT NULL, metrics TEXT NOT NULL, exit_code INTEGER, reason TEXT,
    seconds REAL NOT NULL, created TEXT NOT NULL, details TEXT NOT NULL, run_id TEXT
);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, created TEXT NOT NULL, updated TEXT NOT NULL, kind TEXT NOT NULL,
    command TEXT NOT NULL, config TEXT NOT NULL, status TEXT NOT NULL, result TEXT, config_hash TEXT, owner TEXT
);
CREATE TABLE IF NOT EXISTS blobs (hash TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS steps (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, candidate TEXT NOT NULL, verdict TEXT NOT NULL,
    value REAL, reason TEXT, seconds REAL NOT NULL, measurements TEXT NOT NULL, created TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"""
STORE_VERSION = "1"




def now() -> str:
    """The current UTC time as stored (ISO 8601, seconds)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class Store:
    """The measurement store at ``path`` (created on first use)."""

    def __init__(self, path: Path, read_only: bool = False):
        self.path = Path(path).expanduser()
        self._lock = threading.RLock()  # one connection shared by the k-way worker threads
        self._db: Optional[sqlite3.Connection] = None
        if read_only:
            self._open_read_only()
            self._closer = weakref.finalize(self, self._db.close)
            return
        check_store_path(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            mark = OpenMark(self.path)
        except OSError as exc:
            raise UsageError(f"store {self.path} cannot be opened: {exc.strerror or exc}") from None
        try:
            mark.enter()   # the first one in sets the store up and checks it when it was not closed cleanly
            self._db = sqlite3.connect(str(self.path), timeout=60, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA busy_timeout = 60000")
            if mark.first:
                self._set_up(check=not mark.closed_cleanly())
            self._check_version()
            if mark.first:
                self._add_columns()
            mark.opened()
        except BaseException as exc:
            mark.leave(self._db, clean=False)
            if isinstance(exc, sqlite3.DatabaseError):
                raise self._unusable(exc) from None
            if isinstance(exc, OSError):
                raise UsageError(f"store {self.path} cannot be opened: {exc.strerror or exc}") from None
            raise
        self._closer = weakref.finalize(self, mark.leave, self._db)   # at close(), or when the process exits

    def _set_up(self, check: bool) -> None:
        """WAL mode and the tables; ``check``: refuse the store when ``PRAGMA integrity_check`` finds damage, or
        a row cannot be read (store.records.damaged_rows)."""
        check = check and self.path.stat().st_size > 0
        if check:
            problems = integrity_problems(self._db)
            if problems:
                raise damaged(self.path, problems[0])
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.executescript(SCHEMA)
        rows = damaged_rows(self._db, limit=1) if check else []   # a row no reader can read: no writes either
        if rows:
            raise damaged(self.path, f"{rows[0]}; every reader skips it")

    def _unusable(self, exc: Exception) -> BisectorError:
        if translated(exc, self.path) is not exc:
            return translated(exc, self.path)
        return UsageError(f"store {self.path} is not a usable bisector store ({exc}); "
                          "move it away or pass --store to use another file")

    def _open_read_only(self) -> None:
        """For commands that only read (runs, log, report): a missing store is an error, and
        nothing is created (no file, no directory, no WAL switch)."""
        if not os.path.isfile(self.path):   # (os.path: a name too long is no store either)
            raise UsageError(f"no store at {self.path} (nothing has been measured with it yet; --store names another)")
        if not os.access(self.path, os.R_OK):
            raise UsageError(f"store {self.path} is not readable by this user")
        try:
            row = settled_version(self.path, self._read_version)
        except sqlite3.DatabaseError as exc:
            if not empty_file(self.path):
                raise self._unusable(exc) from None
            row = self._read_empty()
        if row is None or row[0] != STORE_VERSION:
            raise self._unusable(f"store version {row[0] if row else 'missing'}, expected {STORE_VERSION}")
        check_as_reader(self._db, self.path)

    def _read_empty(self) -> tuple:
        """A 0-byte file (as ``touch`` or the ``sqlite3`` shell leaves it) is an empty store: read as one, with
        nothing in it (a store that writes sets it up in place)."""
        if self._db is not None:
            self._db.close()
        self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._db.executescript(SCHEMA)
        self._db.execute("INSERT INTO meta VALUES ('version', ?)", (STORE_VERSION,))
        return (STORE_VERSION,)

    def _read_version(self) -> Optional[tuple]:
        try:
            return self._connect_read_only("mode=ro")
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                raise
            # a WAL store in a directory this user cannot write: SQLite cannot make its -shm file, so read
            # the file as it is (what a finished run left is in it: the last one out checkpoints)
            return self._connect_read_only("immutable=1")

    def _connect_read_only(self, how: str) -> Optional[tuple]:
        if self._db is not None:
            self._db.close()
        self._db = sqlite3.connect(f"{self.path.resolve().as_uri()}?{how}", uri=True, timeout=60,
                                   isolation_level=None, check_same_thread=False)
        return self._db.execute("SELECT value FROM meta WHERE key='version'").fetchone()

    def delete_run(self, run_id: str) -> None:
        """Forget a run that was rejected before it measured anything (its steps too)."""
        with self._tx() as db:
            db.execute("DELETE FROM steps WHERE run_id=?", (run_id,))
            db.execute("DELETE FROM runs WHERE id=?", (run_id,))

    def _check_version(self) -> None:
        with self._tx() as db:
            row = db.execute("SELECT value FROM meta WHERE key='version'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('version', ?)", (STORE_VERSION,))
            elif row[0] != STORE_VERSION:
                raise sqlite3.DatabaseError(f"store version {row[0]}, expected {STORE_VERSION}")

    def _add_columns(self) -> None:
        """Stores made before runs had their own ids (their bisect ids were config hashes) or an owner:
        add the columns."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
        with self._tx() as db:
            if "config_hash" not in columns:
                db.execute("ALTER TABLE runs ADD COLUMN config_hash TEXT")
                db.execute("UPDATE runs SET config_hash = id WHERE kind != 'matrix'")
            if "owner" not in columns:
                db.execute("ALTER TABLE runs ADD COLUMN owner TEXT")

    def _run_columns(self) -> str:
        """The runs columns to select (an older store read without upgrading it lacks some)."""
        with self._lock:
            return run_columns(self._db)

    def _tx(self):
        return Transaction(self._db, self._lock, self.path)

    def _query(self, sql: str, args=()) -> list[tuple]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.DatabaseError as exc:
                raise translated(exc, self.path) from None

    def close(self) -> None:
        self._closer()

    # measurements -------------------------------------------------------------------------
    def get_measurement(self, key: str) -> Optional[Measurement]:
        """The stored measurement (None: none, or its row is damaged: named on stderr, measured again)."""
        rows = self._query("SELECT * FROM measurements WHERE key=?", (key,))
        return next(iter(self._measurements(rows)), None)

    def put_measurement(self, m: Measurement) -> None:
        m = m.model_copy(update={"created": m.created or now()})
        with self._tx() as db:
            details = externalized(db, m.stored_details(), clean_json)   # a result's bulky fields kept once, by hash
            db.execute(
                "INSERT OR REPLACE INTO measurements VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (m.key, m.package, m.candidate, m.env_fingerprint, m.probe_fingerprint, m.repeat,
                 m.status, json.dumps(m.metrics), m.exit_code, clean(m.reason), m.seconds, m.created,
                 clean_json(details), m.run_id))

    def measurements_for(self, package: str, probe_fingerprint: Optional[str] = None) -> list[Measurement]:
        sql, args = "SELECT * FROM measurements WHERE package=?", [package]
        if probe_fingerprint:
            sql, args = sql + " AND probe_fingerprint=?", args + [probe_fingerprint]
        return self._measurements(self._query(sql + " ORDER BY created", args))

    def _measurements(self, rows) -> list[Measurement]:
        """The measurements of ``rows`` that can be read; each damaged one named once (records.tell) and skipped."""
        out = []
        for row in rows:
            m = measurement_from(row, self._blob)
            if isinstance(m, str):
                tell(self.path, "measurements", row[0], m)
            else:
                out.append(m)
        return out

    def _blob(self, digest: str) -> Optional[str]:
        rows = self._query("SELECT data FROM blobs WHERE hash=?", (digest,))
        return rows[0][0] if rows else None

    # runs and steps -----------------------------------------------------------------------
    def put_run(self, run: RunRow) -> None:
        with self._tx() as db:
            db.execute(f"INSERT OR REPLACE INTO runs ({RUN_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
                       (run.id, run.created, run.updated, run.kind, clean_json(run.command),
                        clean_json(run.config), run.status,
                        clean_json(run.result) if run.result is not None else None, run.config_hash,
                        run.owner))

    def get_run(self, run_id: Optional[str] = None) -> Optional[RunRow]:
        """The run with this id (or unique id prefix), the latest readable one without one; None when there
        is none; a usage error naming a run whose stored row cannot be read."""
        cols = self._run_columns()
        if run_id is None:
            rows = self._query(f"SELECT {cols} FROM runs ORDER BY updated DESC, rowid DESC")
            return next(iter(self._readable(rows)), None)
        rows = self._query(f"SELECT {cols} FROM runs WHERE id=?", (run_id,))
        if not rows:   # a unique prefix, matched literally (no LIKE: '%' and '_' are characters here)
            rows = self._query(f"SELECT {cols} FROM runs WHERE substr(id, 1, ?) = ? LIMIT 2",
                               (len(run_id), run_id))
        if len(rows) != 1:
            return None
        run = run_from(rows[0])
        if isinstance(run, str):
            raise UsageError(f"run {rows[0][0]} in {self.path} is damaged ({run}): it cannot be read")
        return run

    def _readable(self, rows) -> list[RunRow]:
        """The runs of ``rows`` that can be read; each damaged one named once on stderr (one line) and skipped."""
        out = []
        for row in rows:
            run = run_from(row)
            if isinstance(run, str):
                tell(self.path, "runs", row[0], run)
            else:
                out.append(run)
        return out

    def runs_with_hash(self, config_hash: str, kind: Optional[str] = None) -> list[RunRow]:
        """The runs of one job (its config hash, or a prefix of it), latest first."""
        cols = self._run_columns()
        key = "config_hash" if "config_hash" in cols else "id"
        # a prefix matched literally (no LIKE: '%' and '_' are characters here)
        sql, args = f"SELECT {cols} FROM runs WHERE substr({key}, 1, ?) = ?", [len(config_hash), config_hash]
        if kind:
            sql, args = sql + " AND kind=?", args + [kind]
        return self._readable(self._query(sql + " ORDER BY updated DESC, rowid DESC", args))

    def list_runs(self) -> list[RunRow]:
        return self._readable(self._query(f"SELECT {self._run_columns()} FROM runs ORDER BY created, rowid"))

    def add_step(self, step: StepRow) -> None:
        step = step.model_copy(update={"created": step.created or now()})
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO steps VALUES (?,?,?,?,?,?,?,?,?)",
                       (step.run_id, step.seq, clean(step.candidate), step.verdict, step.value,
                        clean(step.reason), step.seconds, json.dumps(step.measurements), step.created))

    def steps(self, run_id: str) -> list[StepRow]:
        """The run's log, in order; a damaged step row named once (records.tell) and skipped."""
        out = []
        for row in self._query("SELECT * FROM steps WHERE run_id=? ORDER BY seq", (run_id,)):
            step = step_from(row)
            if isinstance(step, str):
                tell(self.path, "steps", f"{row[0]}/{row[1]}", step)
            else:
                out.append(step)
        return out

    def claim_run(self, run_id: str, owner: str, free: Callable[[str, Optional[str], str], bool]) -> bool:
        """In one transaction: when the run's row is absent, or ``free(its status, its owner, its update time)``,
        mark it running by ``owner`` and clear its step log (True); else leave it as it is (False). Two processes
        that would continue one stopped run cannot both have it."""
        with self._tx() as db:
            row = db.execute("SELECT status, owner, updated FROM runs WHERE id=?", (run_id,)).fetchone()
            if row is not None and not free(row[0], row[1], row[2]):
                return False
            db.execute("UPDATE runs SET status=?, owner=? WHERE id=?", (RunState.RUNNING, owner, run_id))
            db.execute("DELETE FROM steps WHERE run_id=?", (run_id,))
        return True

    def clear_steps(self, run_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM steps WHERE run_id=?", (run_id,))

