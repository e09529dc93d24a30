"""What a store's rows are, and each row read into its model or into why it cannot be.

Runs, steps and measurements are stored as columns of JSON text; a row whose JSON is broken (or
nested past what Python reads) or whose values its model refuses (a verdict it does not know, a kind
that is no :class:`RunKind`) is *damaged*: every reader skips it and names it once on stderr in one
line (:func:`tell`), ``bisector store check`` lists it (:func:`damaged_rows`), and a store that holds
one is refused for writing until ``bisector store recover`` has copied the readable rows into a new one.
"""
from __future__ import annotations

import enum
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from pydantic import BaseModel

from bisector.core.measurement import Measurement
from bisector.core.verdict import Verdict
from bisector.redact import redact_data, redact_text
from bisector.safety.safe_text import one_line
from bisector.store.blobs import hydrated

RUN_COLUMNS = "id, created, updated, kind, command, config, status, result, config_hash, owner"


class RunKind(enum.StrEnum):
    """What a stored run is."""

    BISECT = "bisect"
    MATRIX = "matrix"
    DIFF = "diff"
    PROBE = "probe"     # one measurement of one version (`bisector probe`)


class RunState(enum.StrEnum):
    """A run's status while it is not finished (a finished bisect stores its outcome instead)."""

    RUNNING = "running"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    DONE = "done"


class RunRow(BaseModel):
    """A stored bisect or matrix run: its command, config and final result.

    ``status`` is a :class:`RunState`, or for a finished bisect its outcome (found, undecided, ...).
    """

    id: str
    created: str
    updated: str
    kind: RunKind
    command: list[str]
    config: dict[str, Any]
    status: str
    result: Optional[dict[str, Any]] = None
    config_hash: Optional[str] = None   # identical jobs share it: what --resume and reuse look up
    owner: Optional[str] = None         # host:pid:start of the process running it (while it is running)


class StepRow(BaseModel):
    """One line of a run's bisect log."""

    run_id: str
    seq: int
    candidate: str
    verdict: Verdict
    value: Optional[float] = None
    reason: Optional[str] = None
    seconds: float
    measurements: list[str]
    created: str = ""


def _why(exc: BaseException) -> str:
    first = str(exc).splitlines()[0][:80] if str(exc) else ""
    return f"{type(exc).__name__}: {first}".rstrip(": ")


def _read(make: Callable[[], Any]) -> Any:
    """``make()``, or why the row cannot be read (broken JSON, a value its model refuses, nesting too deep)."""
    try:
        return make()
    except (ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:   # JSONDecodeError, ValidationError
        return _why(exc)


def run_from(row: tuple) -> "RunRow | str":
    """A ``runs`` row (:data:`RUN_COLUMNS`) as its run, or why it cannot be read."""
    return _read(lambda: RunRow(id=row[0], created=row[1], updated=row[2], kind=row[3], command=json.loads(row[4]),
                                config=json.loads(row[5]), status=row[6],
                                result=json.loads(row[7]) if row[7] else None, config_hash=row[8],
                                owner=row[9] if len(row) > 9 else None))


def step_from(row: tuple) -> "StepRow | str":
    """A ``steps`` row as its step, or why it cannot be read."""
    return _read(lambda: StepRow(run_id=row[0], seq=row[1], candidate=row[2], verdict=row[3], value=row[4],
                                 reason=row[5], seconds=row[6], measurements=json.loads(row[7]), created=row[8]))


def _measurement(row: tuple, blob: Callable[[str], Optional[str]]) -> Measurement:
    details = json.loads(row[12])
    if not isinstance(details, dict):
        raise TypeError(f"details is a {type(details).__name__}, not an object")
    details = hydrated(details, blob)
    env = details.get("env")
    if isinstance(env, dict) and isinstance(env.get("path"), str):   # stored with the home directory as ~
        details["env"] = {**env, "path": os.path.expanduser(env["path"])}   # (redacted)
    return Measurement(key=row[0], package=row[1], candidate=row[2], env_fingerprint=row[3], probe_fingerprint=row[4],
                       repeat=row[5], status=row[6], metrics=json.loads(row[7]), exit_code=row[8], reason=row[9],
                       seconds=row[10], created=row[11], details=details, run_id=row[13])


def measurement_from(row: tuple, blob: Callable[[str], Optional[str]]) -> "Measurement | str":
    """A ``measurements`` row as its measurement (its bulky fields read back by ``blob``), or why it cannot be."""
    return _read(lambda: _measurement(row, blob))


_TOLD: set = set()   # (store, table, row) of damaged rows already named on stderr


def tell(path: Path, table: str, key: Any, why: str) -> None:
    """Name a damaged row once on stderr (one line): a reader skips it and goes on."""
    told = (str(path), table, str(key))
    if told not in _TOLD:
        _TOLD.add(told)
        print(one_line(f"bisector: skipped {table} row {str(key)[:60]} in {path}: its stored row is damaged ({why}); "
                       f"`bisector store recover --store {path}` keeps the readable rows"), file=sys.stderr)


def run_columns(db: sqlite3.Connection) -> str:
    """The runs columns to select, as :data:`RUN_COLUMNS` (an older store, read as it is, lacks some: its
    bisect ids were config hashes; it names no owners)."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
    cols = RUN_COLUMNS if "config_hash" in columns else RUN_COLUMNS.replace("config_hash", "id")
    return cols if "owner" in columns else cols.replace("owner", "NULL")


def damaged_rows(db: sqlite3.Connection, limit: int = 100) -> list[str]:
    """The rows of runs, steps and measurements that cannot be read, at most ``limit``, each as
    ``"<table> row <key>: <why>"`` (empty: every row reads)."""
    out: list[str] = []

    def blob(digest: str) -> Optional[str]:
        found = db.execute("SELECT data FROM blobs WHERE hash=?", (digest,)).fetchone()
        return found[0] if found else None

    scans = (("runs", f"SELECT {run_columns(db)} FROM runs", run_from, lambda r: r[0]),
             ("steps", "SELECT * FROM steps", step_from, lambda r: f"{r[0]}/{r[1]}"),
             ("measurements", "SELECT * FROM measurements", lambda r: measurement_from(r, blob), lambda r: r[0]))
    for table, sql, read, key in scans:
        for row in db.execute(sql):
            why = read(row)
            if isinstance(why, str):
                out.append(f"{table} row {str(key(row))[:60]}: {why}")
                if len(out) >= limit:
                    return out
    return out


def clean(text: Optional[str]) -> Optional[str]:
    """A text column as stored: through the redaction pass; a lone surrogate (an undecodable byte of a path or an
    argument) kept as its escape, which SQLite can hold."""
    return None if text is None else redact_text(text).encode("utf-8", "backslashreplace").decode("utf-8")


def clean_json(value: Any) -> str:
    """A JSON column as stored: the data through the redaction pass (a command's words masked one by one, JSON
    kept JSON whatever its strings hold), lone surrogates as JSON escapes."""
    return json.dumps(redact_data(value))
