"""Issue 34, "readers that never crash": a runs row whose JSON is broken is named in one line and skipped by every
reader (``runs``, ``report``, ``--resume``'s lookup), and the other runs still read; a report of that run is one
line and exit 2. Steps and measurements rows likewise (broken JSON, a value the model refuses); ``store check``
finds such rows, and a store holding one is refused for writing until ``store recover``."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bisector.cli.main import main
from bisector.core.measurement import Measurement, Status
from bisector.errors import UsageError
from bisector.job.jobfile import load_config
from bisector.store.storage import RunKind, RunRow, StepRow, Store, now
from tests.process import test_hostile as battery
from tests.process.test_hostile import world  # noqa: F401 - the battery's world (a fixture)
from tests.support.hostile import Kind, releases


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "s.db"
    s = Store(path)
    config = load_config(None, {}).model_dump(mode="json")
    for i in range(3):
        s.put_run(RunRow(id=f"run{i:04d}", created=now(), updated=now(), kind=RunKind.BISECT, command=["bisector"],
                         config=config, status="interrupted", config_hash="cafe"))
    s.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE runs SET config='{broken' WHERE id='run0001'")
    db.execute("UPDATE runs SET command='[' || printf('%.*c', 100000, '[') WHERE id='run0002'")   # 100,000 deep
    db.commit()
    db.close()
    return path


def test_runs_lists_the_readable_and_names_the_damaged(store, capsys):
    assert main(["runs", "--store", str(store)]) == 0
    out, err = capsys.readouterr()
    assert "run0000" in out and "1 run(s)" in out
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all("its stored row is damaged" in line for line in lines), err
    assert "run0001" in lines[0] + lines[1] and "run0002" in lines[0] + lines[1]


def test_report_of_a_damaged_run_is_one_line(store, capsys):
    assert main(["report", "run0001", "--store", str(store)]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "run0001" in err and "damaged" in err


def test_resume_lookup_skips_the_damaged(store):
    runs = Store(store, read_only=True).runs_with_hash("cafe")
    assert [r.id for r in runs] == ["run0000"]


# -- steps and measurements rows, store check, writes refused ------------------------------------------------
@pytest.fixture
def steps_store(tmp_path):
    """One finished bisect with four steps and three measurements; then, behind bisector's back, two steps and
    every measurement damaged (broken JSON, a verdict no log knows, a status no measurement has)."""
    path = tmp_path / "s.db"
    s = Store(path)
    s.put_run(RunRow(id="run0000", created=now(), updated=now(), kind=RunKind.BISECT, command=["bisector"],
                     config=load_config(None, {}).model_dump(mode="json"), status="found"))
    for seq, (cand, verdict) in enumerate([("1.0", "good"), ("1.2", "bad"), ("1.1", "good"), ("1.15", "bad")]):
        s.add_step(StepRow(run_id="run0000", seq=seq, candidate=cand, verdict=verdict, value=1.0 + seq, seconds=1.0,
                           measurements=[f"m{seq}"]))
    for i in range(4):
        s.put_measurement(Measurement(key=f"m{i}", package="acc", candidate=f"1.{i}", env_fingerprint="e",
                                      probe_fingerprint="p", status=Status.OK, metrics={"m": 1.0}, seconds=1.0,
                                      details={"result": {"schema_version": "x/1"}}))
    s.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE steps SET measurements='{' WHERE seq=1")
    db.execute("UPDATE steps SET verdict='MAYBE' WHERE seq=2")
    db.execute("UPDATE measurements SET metrics='[' WHERE key='m1'")
    db.execute("UPDATE measurements SET status='weird' WHERE key='m2'")
    db.execute("UPDATE measurements SET details='{\"result\": ' WHERE key='m3'")
    db.commit()
    db.close()
    return path


def test_log_skips_damaged_steps_and_names_each_in_one_line(steps_store, capsys):
    assert main(["log", "run0000", "--store", str(steps_store)]) == 0
    out, err = capsys.readouterr()
    assert "good 1.0 value=1" in out and "bad 1.15 value=4" in out and " 1.2 " not in out and " 1.1 " not in out
    lines = err.strip().splitlines()
    assert len(lines) == 2 and "steps row run0000/1" in lines[0] and "JSONDecodeError" in lines[0], err
    assert "steps row run0000/2" in lines[1] and "ValidationError" in lines[1] and "store recover" in lines[1]


def test_measurement_readers_skip_damaged_rows_and_name_them(steps_store, capsys):
    store = Store(steps_store, read_only=True)
    assert [m.key for m in store.measurements_for("acc")] == ["m0"]
    assert store.get_measurement("m1") is None and store.get_measurement("m0").metrics == {"m": 1.0}
    err = capsys.readouterr().err
    assert [line.split(" in ")[0] for line in err.strip().splitlines()] == [
        f"bisector: skipped measurements row m{i}" for i in (1, 2, 3)], err   # each once, though read twice


def test_store_check_finds_damaged_rows_and_a_write_is_refused_until_recovered(steps_store, capsys):
    assert main(["store", "check", "--store", str(steps_store)]) == 1
    out = capsys.readouterr().out
    assert "is damaged: steps row run0000/1: JSONDecodeError" in out and "(+2 more)" in out and "store recover" in out
    for _ in range(2):   # refused, and refused again (it stays marked for the check)
        with pytest.raises(UsageError, match=r"is damaged \(steps row run0000/1.*bisector store recover"):
            Store(steps_store)
    assert main(["store", "recover", "--store", str(steps_store)]) == 0
    assert main(["store", "check", "--store", str(steps_store)]) == 0
    assert "ok (1 runs, 1 measurements, 2 steps)" in capsys.readouterr().out
    Store(steps_store).close()   # writable again


def _damaged_rows_store(tmp: Path, world) -> None:
    path = tmp / "s.db"
    s = Store(path)
    s.put_run(RunRow(id="run0000", created=now(), updated=now(), kind=RunKind.BISECT, command=["bisector"],
                     config={}, status="found"))
    s.add_step(StepRow(run_id="run0000", seq=0, candidate="1.0", verdict="good", seconds=1.0, measurements=[]))
    s.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE steps SET measurements='{' WHERE seq=0")
    db.commit()
    db.close()


KINDS = [Kind("stores", "a store with a damaged steps row is refused for a run", releases(), 2,
              "store recover", setup=_damaged_rows_store)]
BATTERY = [k.id for k in KINDS] + ["stores: damaged runs rows skipped by runs, report and --resume",
                                    "stores: damaged steps rows skipped by log",
                                    "stores: damaged measurements rows skipped by every reader",
                                    "stores: store check finds damaged rows"]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.id)
def test_a_run_into_a_store_with_damaged_rows_is_refused(kind, world, tmp_path, monkeypatch, capsys):
    battery.run_kind(kind, world, tmp_path, monkeypatch, capsys)
