"""Issue 34, "readers that never crash": a runs row whose JSON is broken is named in one line and skipped by every
reader (``runs``, ``report``, ``--resume``'s lookup), and the other runs still read; a report of that run is one
line and exit 2."""
from __future__ import annotations

import sqlite3

import pytest

from bisector.cli.main import main
from bisector.job.jobfile import load_config
from bisector.store.storage import RunKind, RunRow, Store, now


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
