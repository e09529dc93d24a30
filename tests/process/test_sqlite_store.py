"""The SQLite store: round trips, runs and steps, damaged or foreign files, concurrent writers."""
from __future__ import annotations

import json
import multiprocessing
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from bisector.errors import BisectorError
from bisector.core.measurement import Measurement
from bisector.store.storage import RunKind, RunRow, StepRow, Store, now


def _m(key: str, **kw) -> Measurement:
    data = dict(key=key, package="p", candidate="1.0", env_fingerprint="e", probe_fingerprint="f",
                status="ok", metrics={"m": 1.0}, seconds=0.5)
    data.update(kw)
    return Measurement(**data)


def test_round_trip_survives_reopen(tmp_path):
    path = tmp_path / "s.db"
    s = Store(path)
    s.put_measurement(_m("a", details={"x": [1, 2]}))
    s.put_run(RunRow(id="r1", created=now(), updated=now(), kind="bisect", command=["bisector", "run"],
                     config={"job": {"package": "p"}}, status="running"))
    s.add_step(StepRow(run_id="r1", seq=0, candidate="1.0", verdict="good", seconds=1.0, measurements=["a"]))
    s.close()
    s = Store(path)
    assert s.get_measurement("a").details == {"x": [1, 2]}
    assert s.get_run("r1").status == "running" and s.get_run("r").id == "r1"
    assert [st.verdict for st in s.steps("r1")] == ["good"]
    assert s.get_measurement("missing") is None


def test_a_lone_surrogate_in_stored_text_is_kept_as_its_escape(tmp_path):
    """An undecodable byte of a path or an argument (a lone surrogate) in a step's reason or a measurement's
    reason is stored as its escape, not an encoding error that loses the row."""
    s = Store(tmp_path / "s.db")
    s.put_run(RunRow(id="r1", created=now(), updated=now(), kind="bisect", command=["bisector", "\udcff"],
                     config={}, status="running"))
    s.add_step(StepRow(run_id="r1", seq=0, candidate="1.0\udcff", verdict="skip", reason="no such file /tmp/\udcff",
                       seconds=0.1, measurements=[]))
    s.put_measurement(_m("a").model_copy(update={"reason": "x\ud800y"}))
    assert [st.reason for st in s.steps("r1")] == ["no such file /tmp/\\udcff"]
    assert s.steps("r1")[0].candidate == "1.0\\udcff" and s.get_measurement("a").reason == "x\\ud800y"
    assert s.get_run("r1").command == ["bisector", "\udcff"]


def test_store_uses_wal(tmp_path):
    Store(tmp_path / "s.db")
    assert sqlite3.connect(tmp_path / "s.db").execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize("content", [b"this is not a database at all" * 100, b"SQLite format 3\x00" + b"\x00" * 50])
def test_foreign_or_truncated_file_is_one_clear_error(tmp_path, content):
    path = tmp_path / "s.db"
    path.write_bytes(content)
    with pytest.raises(BisectorError, match="not a usable bisector store") as info:
        Store(path)
    assert "\n" not in str(info.value)


def test_other_sqlite_schema_version_is_refused(tmp_path):
    path = tmp_path / "s.db"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='99' WHERE key='version'")
    db.commit()
    with pytest.raises(BisectorError, match="store version 99"):
        Store(path)


def test_two_processes_write_concurrently(tmp_path):
    path = tmp_path / "s.db"
    Store(path).close()
    code = textwrap.dedent(f"""
        import sys
        from bisector.core.measurement import Measurement
        from bisector.store.storage import Store
        s = Store({str(path)!r})
        for i in range(200):
            s.put_measurement(Measurement(key=sys.argv[1] + str(i), package="p", candidate=str(i),
                              env_fingerprint="e", probe_fingerprint="f", status="ok", seconds=0.0))
        """)
    procs = [subprocess.Popen([sys.executable, "-c", code, tag]) for tag in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert len(Store(path).measurements_for("p")) == 400


def _open_at_once(path: str, barrier, results) -> None:
    barrier.wait()
    try:
        Store(path).close()
        results.put("ok")
    except BisectorError as exc:
        results.put(str(exc))


def test_processes_creating_one_store_at_the_same_moment_all_succeed(tmp_path):
    """Two `bisector run`s started together on a fresh store must both get it (setting WAL races)."""
    ctx = multiprocessing.get_context("fork")
    for i in range(25):
        barrier, results = ctx.Barrier(4), ctx.Queue()
        procs = [ctx.Process(target=_open_at_once, args=(str(tmp_path / f"{i}.db"), barrier, results))
                 for _ in range(4)]
        for p in procs:
            p.start()
        outcomes = [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert outcomes == ["ok"] * 4, outcomes


def _half_set_up(path, tables: bool) -> None:
    """A store as another process leaves it for a moment while it sets the store up: the lock file is
    there, the file is empty or has its tables without the version row."""
    (path.parent / (path.name + ".init.lock")).write_text("")
    path.write_bytes(b"")
    if tables:
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.commit()
        db.close()


@pytest.mark.parametrize("tables", [False, True])
def test_a_reader_waits_for_a_store_being_set_up_right_now(tmp_path, tables):
    """`bisector run` looks for an interrupted run read-only; a second run started at the same moment
    found the first one's store half made and stopped with "not a usable bisector store" (CI, once)."""
    path = tmp_path / "s.db"
    _half_set_up(path, tables)
    timer = threading.Timer(0.5, lambda: Store(path).close())   # the other process finishes its set-up
    timer.start()
    try:
        reader = Store(path, read_only=True)
    finally:
        timer.join()
    assert reader.list_runs() == []


def test_a_half_made_store_that_nobody_is_setting_up_is_refused_at_once(tmp_path):
    path = tmp_path / "s.db"
    _half_set_up(path, tables=True)
    (path.parent / (path.name + ".init.lock")).unlink()
    start = time.monotonic()
    with pytest.raises(BisectorError, match="not a usable bisector store"):
        Store(path, read_only=True)
    assert time.monotonic() - start < 5


def test_a_0_byte_file_is_an_empty_store(tmp_path):
    """Issue 47: a 0-byte file at the store path (``touch``, the ``sqlite3`` shell) is an empty store, read as
    one at once and set up in place by a writer (it was refused as "not a usable bisector store")."""
    path = tmp_path / "s.db"
    path.write_bytes(b"")
    assert Store(path, read_only=True).list_runs() == [] and path.stat().st_size == 0
    store = Store(path)
    store.put_run(RunRow(id="r1", created=now(), updated=now(), kind=RunKind.BISECT, command=["bisector"], config={},
                         status="found"))
    store.close()
    assert [r.id for r in Store(path, read_only=True).list_runs()] == ["r1"]


def test_a_store_from_before_run_ids_keeps_its_runs_findable_by_config_hash(tmp_path):
    """Stores written when a bisect's run id was its config hash: read-only they list as before; opened
    for writing they gain the column, the old ids as the hashes, and new runs get their own ids."""
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('version', '1');
        CREATE TABLE runs (id TEXT PRIMARY KEY, created TEXT NOT NULL, updated TEXT NOT NULL, kind TEXT NOT NULL,
                           command TEXT NOT NULL, config TEXT NOT NULL, status TEXT NOT NULL, result TEXT);
        INSERT INTO runs VALUES ('abcdef123456', '2025-01-01', '2025-01-01', 'bisect', '["bisector"]', '{}', 'found', NULL);
    """)
    db.commit()
    db.close()
    ro = Store(path, read_only=True)
    assert [(r.id, r.config_hash) for r in ro.list_runs()] == [("abcdef123456", "abcdef123456")]
    assert [r.id for r in ro.runs_with_hash("abcdef")] == ["abcdef123456"]
    ro.close()
    s = Store(path)
    s.put_run(RunRow(id="0123456789ab", created=now(), updated=now(), kind="bisect", command=["bisector"],
                     config={}, status="found", config_hash="abcdef123456"))
    assert [r.id for r in s.runs_with_hash("abcdef123456", "bisect")] == ["0123456789ab", "abcdef123456"]


def test_a_results_bulky_fields_are_kept_once_and_read_back_whole(tmp_path):
    """Repeats whose per-cell data came out the same (memory is deterministic) store it once; every reader
    gets the whole result back, and small fields stay in the row."""
    path = tmp_path / "s.db"
    cells = [{"cell": f"bf16.ga2.h{i}", "sites": [{"site": f"modeling.py:{j}", "bytes": j} for j in range(40)]}
             for i in range(60)]
    store = Store(path)
    store.put_measurement(_m("small", details={"result": {"meter": "cpu"}}))
    size = path.stat().st_size
    for repeat in range(10):
        store.put_measurement(_m(f"r{repeat}", repeat=repeat, details={"result": {"cells": cells, "meter": "cpu"}}))
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 1
    row = db.execute("SELECT details FROM measurements WHERE key='r3'").fetchone()[0]
    assert '"$blob"' in row and len(row) < 200
    db.close()
    store = Store(path, read_only=True)
    assert store.get_measurement("r7").stored_details() == {"result": {"cells": cells, "meter": "cpu"}}
    assert store.get_measurement("r7").result.cells == cells
    assert store.get_measurement("small").stored_details() == {"result": {"meter": "cpu"}}
    assert len(store.measurements_for("p")) == 11
    one_copy = len(json.dumps(cells))
    assert path.stat().st_size - size < 3 * one_copy   # ten measurements, one copy of their cells (and pages)
