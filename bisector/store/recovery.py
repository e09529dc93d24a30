"""``bisector store check|recover``: what ``PRAGMA integrity_check`` finds in a store, and a new store
holding every row that can still be read from a damaged one.

Rows are read in rowid order a window at a time; a window that touches a damaged page is skipped
forward in growing steps until reading works again, so one bad page costs the rows on it, never the
rest of the table. A row whose JSON columns do not parse is left out (it is damage too).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel

from bisector.errors import UsageError
from bisector.store.storage import SCHEMA, STORE_VERSION
from bisector.store.integrity import OpenMark, empty_file, integrity_problems
from bisector.store.records import damaged_rows, measurement_from, run_from, step_from

TABLES = {"meta": (), "runs": (4, 5, 7), "measurements": (7, 12), "blobs": (1,), "steps": (7,)}   # -> JSON columns
WINDOW = 256
MAX_SKIP = 1 << 62


class TableCount(BaseModel):
    """How one table came through: rows copied, rows left out as damaged, windows skipped over bad pages."""

    copied: int = 0
    unreadable_rows: int = 0
    skipped_ranges: int = 0


class Recovery(BaseModel):
    """What ``recover`` did: per table, and where the copy and the damaged original are."""

    tables: dict[str, TableCount]
    written: str
    damaged_kept: str | None = None


def _open(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise UsageError(f"no store at {path}")
    for how in ("mode=ro", "immutable=1"):
        try:
            db = sqlite3.connect(f"{path.resolve().as_uri()}?{how}", uri=True, isolation_level=None)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            continue
        except sqlite3.DatabaseError as exc:
            raise UsageError(f"{path} cannot be read as an SQLite database ({exc}): nothing can be recovered") from None
    raise UsageError(f"store {path} cannot be opened for reading")


def check(path: Path) -> list[str]:
    """The damage ``PRAGMA integrity_check`` reports, else the rows no reader can read (broken JSON, a value
    its model refuses: store.records.damaged_rows); empty: sound (a 0-byte file is an empty store)."""
    if empty_file(Path(path)):
        return []
    db = _open(path)
    try:
        return integrity_problems(db) or damaged_rows(db)
    except (sqlite3.DatabaseError, RecursionError) as exc:
        return [str(exc)]
    finally:
        db.close()


def _window(db: sqlite3.Connection, table: str, after: int) -> list[tuple]:
    return db.execute(f"SELECT rowid, * FROM {table} NOT INDEXED WHERE rowid > ? ORDER BY rowid LIMIT {WINDOW}",
                      (after,)).fetchall()


def readable_rows(db: sqlite3.Connection, table: str, count: TableCount) -> Iterator[tuple]:
    """Every row of ``table`` that can be read, in rowid order (without the rowid)."""
    after = 0
    while True:
        try:
            rows = _window(db, table, after)
        except sqlite3.DatabaseError:
            step = 1
            while True:   # skip forward over the damaged page(s)
                try:
                    _window(db, table, after + step)
                    break
                except sqlite3.DatabaseError:
                    step *= 2
                    if step > MAX_SKIP:
                        return
            count.skipped_ranges += 1
            after += step
            continue
        if not rows:
            return
        for row in rows:
            yield row[1:]
        after = rows[-1][0]


def _parses(row: tuple, json_columns: tuple[int, ...], table: str, source: sqlite3.Connection) -> bool:
    """The row's JSON parses and its model takes it (what every reader of the new store will ask)."""
    try:
        for i in json_columns:
            if row[i] is not None:
                json.loads(row[i])
    except (TypeError, ValueError, IndexError, RecursionError):
        return False
    read = READERS.get(table)
    return read is None or not isinstance(read(row, source), str)


def _blob_of(source: sqlite3.Connection):
    def blob(digest: str):
        try:
            found = source.execute("SELECT data FROM blobs WHERE hash=?", (digest,)).fetchone()
        except sqlite3.DatabaseError:
            return None
        return found[0] if found else None
    return blob


READERS = {"runs": lambda row, db: run_from(row[:10]), "steps": lambda row, db: step_from(row),
           "measurements": lambda row, db: measurement_from(row, _blob_of(db))}


def _copy(source: sqlite3.Connection, target: sqlite3.Connection) -> dict[str, TableCount]:
    counts = {}
    for table, json_columns in TABLES.items():
        count = counts[table] = TableCount()
        try:
            width = len(target.execute(f"SELECT * FROM {table} LIMIT 0").description)
        except sqlite3.DatabaseError:
            continue
        marks = ",".join("?" * width)
        for row in readable_rows(source, table, count):
            if table == "runs" and len(row) < width:   # an older store's runs: the columns added since are empty
                row = tuple(row) + (None,) * (width - len(row))
            if len(row) != width or not _parses(row, json_columns, table, source):
                count.unreadable_rows += 1
                continue
            target.execute(f"INSERT OR REPLACE INTO {table} VALUES ({marks})", row)
            count.copied += 1
    return counts


def recover(path: Path, out: Path | None = None) -> Recovery:
    """Copy every readable row of the store at ``path`` into a new store: ``out``, or (without it) in
    ``path``'s place, the damaged file kept next to it as ``<path>.damaged-<time>``."""
    path = Path(path).expanduser()
    target = Path(out).expanduser() if out else Path(f"{path}.recovering")
    if out and target.exists():
        raise UsageError(f"--out {target} exists; name a new file")
    mark, swapped = OpenMark(path), False
    try:
        mark.enter()
        if not mark.first:
            raise UsageError(f"store {path} is open in another bisector process; recover it when that one has ended")
        source = _open(path)
        target.unlink(missing_ok=True)
        db = sqlite3.connect(target, isolation_level=None)
        db.executescript(SCHEMA)
        db.execute("BEGIN")
        counts = _copy(source, db)
        db.execute("INSERT OR IGNORE INTO meta VALUES ('version', ?)", (STORE_VERSION,))
        db.execute("COMMIT")
        db.close()
        source.close()
        kept = None
        if out is None:
            stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
            kept = Path(f"{path}.damaged-{stamp}")
            for suffix in ("-wal", "-shm"):
                if Path(f"{path}{suffix}").exists():
                    os.replace(f"{path}{suffix}", f"{kept}{suffix}")
            os.replace(path, kept)
            os.replace(target, path)
            target, swapped = path, True
    finally:
        mark.leave(None, clean=swapped)   # the damaged original stays marked for the check
    return Recovery(tables=counts, written=str(target), damaged_kept=str(kept) if kept else None)
