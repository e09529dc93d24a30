"""Issue 47's kinds of the hostile battery that run in process (tests/process/test_hostile.py's checks: the exit
code, one line saying why, nothing created or stored, no process left, no planted secret printed): destinations
that would destroy data (the store, its files, a link to it, the cache, a file bisector did not write, a
trailing slash), an empty (0-byte) store file, a deeply corrupted store read, bad usage (a command run without
a rule, a deleted working directory, 300-character names, a command word that is not UTF-8), and two processes
that would continue one stopped run."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bisector.cli.main import main
from bisector.store.storage import RunKind, RunRow, StepRow, Store, now
from tests.process import test_hostile as battery
from tests.process.test_hostile import MATRIX_TOML, world  # noqa: F401 - the battery's world (a fixture)
from tests.support.hostile import Kind, releases

ROOT = Path(__file__).resolve().parents[2]
LONG = "n" * 300


def a_finished_run(tmp: Path, world) -> None:
    """{tmp}/s.db holding one finished bisect (its result renders), closed cleanly."""
    from tests.unit.test_command_words import _result

    store = Store(tmp / "s.db")
    store.put_run(RunRow(id="r1", created=now(), updated=now(), kind=RunKind.BISECT, command=["bisector", "run"],
                         config={}, status="found", result=_result(["python", "t.py"]).model_dump(mode="json")))
    store.close()


def _also(*setups):
    def setup(tmp: Path, world) -> None:
        for one in setups:
            one(tmp, world)
    return setup


def hard_link(tmp: Path, world) -> None:
    os.link(tmp / "s.db", tmp / "other-name.db")


def another_sqlite(tmp: Path, world) -> None:
    db = sqlite3.connect(tmp / "notes.db")
    db.execute("CREATE TABLE notes (text TEXT)")
    db.commit()
    db.close()


def users_files(tmp: Path, world) -> None:
    for rel in ("train.py", "out/matrix.md", "html/index.html", "drafts/notes.md"):
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text("# my own work, hours of it\n")


def a_directory(tmp: Path, world) -> None:
    (tmp / "reports").mkdir()


def empty_store(tmp: Path, world) -> None:
    (tmp / "s.db").write_bytes(b"")


def deeply_corrupted(tmp: Path, world) -> None:
    """A store of 300 runs and steps, closed cleanly, then one page near its end overwritten behind bisector's back
    (``log`` of an early run never reads that page)."""
    store = Store(tmp / "s.db")
    for i in range(300):
        store.put_run(RunRow(id=f"run{i:04d}", created=now(), updated=now(), kind=RunKind.BISECT,
                             command=["bisector"], config={"pad": "x" * 1500}, status="found"))
        store.add_step(StepRow(run_id=f"run{i:04d}", seq=0, candidate="c", verdict="good", value=1.0,
                               reason="r" * 500, seconds=1.0, measurements=[]))
    store.close()
    data = bytearray((tmp / "s.db").read_bytes())
    page = len(data) // 4096 - 5
    data[4096 * page:4096 * (page + 1)] = b"\xa5" * 4096
    (tmp / "s.db").write_bytes(bytes(data))


def _report(*extra: str) -> list[str]:
    return ["report", "--store", "{tmp}/s.db", "--cache-dir", "{tmp}/cache", *extra]


def _matrix(*extra: str) -> list[str]:
    return ["matrix", "--config", "{tmp}/m.toml", "--store", "{tmp}/s.db", "--cache-dir", "{tmp}/cache", *extra]


M = {"m.toml": MATRIX_TOML}
KINDS = [
    Kind("destinations", "report --repro at the store", _report("--repro", "{tmp}/s.db"), 2,
         "--repro {tmp}/s.db is the store {tmp}/s.db: an output never replaces it", setup=a_finished_run),
    Kind("destinations", "report --repro at the store's WAL", _report("--repro", "{tmp}/s.db-wal"), 2,
         "is the store {tmp}/s.db's own file s.db-wal", setup=a_finished_run),
    Kind("destinations", "report --repro at the store's lock file", _report("--repro", "{tmp}/s.db.init.lock"), 2,
         "own file s.db.init.lock", setup=a_finished_run),
    Kind("destinations", "report --repro at a hard link to the store", _report("--repro", "{tmp}/other-name.db"), 2,
         "is the store {tmp}/s.db", setup=_also(a_finished_run, hard_link)),
    Kind("destinations", "report --repro at another SQLite database", _report("--repro", "{tmp}/notes.db"), 2,
         "is a file of yours, not one of bisector's outputs", setup=_also(a_finished_run, another_sqlite)),
    Kind("destinations", "report --repro at the user's own script", _report("--repro", "{tmp}/train.py"), 2,
         "--repro {tmp}/train.py is a file of yours, not one of bisector's outputs", setup=_also(a_finished_run, users_files)),
    Kind("destinations", "report --repro at a missing DIR/", _report("--repro", "{tmp}/nowhere/"), 2,
         "no directory {tmp}/nowhere (a trailing slash names a directory", setup=a_finished_run),
    Kind("destinations", "report --repro at an existing DIR/", _report("--repro", "{tmp}/reports/"), 2,
         "--repro {tmp}/reports/ is a directory: name a file", setup=_also(a_finished_run, a_directory)),
    Kind("destinations", "report --repro inside the cache", _report("--repro", "{tmp}/cache/envs/x.py"), 2,
         "is in the environment cache {tmp}/cache", setup=a_finished_run),
    Kind("destinations", "matrix --out at the cache", _matrix("--out", "{tmp}/cache"), 2,
         "--out {tmp}/cache is the environment cache", files=M),
    Kind("destinations", "matrix --out holding the user's matrix.md", _matrix("--out", "{tmp}/out"), 2,
         "matrix.md is a file of yours, not one of bisector's outputs", files=M, setup=users_files),
    Kind("destinations", "matrix --html holding the user's index.html", _matrix("--out", "{tmp}/o2", "--html",
                                                                                "{tmp}/html"), 2,
         "index.html is a file of yours, not one of bisector's outputs", files=M, setup=users_files),
    Kind("destinations", "matrix --issues holding the user's notes", _matrix("--out", "{tmp}/o2", "--issues",
                                                                             "{tmp}/drafts"), 2,
         "notes.md is a file of yours, not one of bisector's outputs", files=M, setup=users_files),
    Kind("destinations", "a file where the reports beside the store go", releases(), 2,
         "the reports directory beside the store {tmp}/reports is not a directory", files={"reports": "my notes\n"}),
    Kind("stores", "a 0-byte store listed", ["runs", "--store", "{tmp}/s.db"], 0, "no runs in {tmp}/s.db",
         setup=empty_store),
    Kind("stores", "a 0-byte store checked", ["store", "check", "--store", "{tmp}/s.db"], 0,
         "ok (an empty file: an empty store, 0 runs", setup=empty_store),
    Kind("stores", "a 0-byte store's report", ["report", "--store", "{tmp}/s.db"], 2, "no finished runs in",
         setup=empty_store),
    Kind("stores", "a deeply corrupted store read by log", ["log", "run0001", "--store", "{tmp}/s.db"], 2,
         "is damaged (database disk image is malformed)", setup=deeply_corrupted),
    Kind("usage", "a command run of a count without a rule", releases("--metric", "optimizer_steps", "--", "python",
                                                                     "train.py", probe_cmd=None), 2,
         "no rule for optimizer_steps: give --threshold X, --max-increase X or X%, --auto, --max-change X"),
    Kind("usage", "a command word that is not UTF-8", releases("--max-increase", "5%", "--", "python", "\udcff",
                                                                probe_cmd=None), 2,
         "a value holds a byte that is not UTF-8"),
    Kind("usage", "a 300-character store name", releases(store="{tmp}/" + LONG + ".db"), 2,
         "a name of 303 bytes, longer than the 255 this filesystem allows"),
    Kind("usage", "a 300-character cache directory", releases(cache_dir="{tmp}/" + LONG), 2,
         "a name of 300 bytes, longer than the 255"),
    Kind("usage", "a 300-character matrix --out", _matrix("--out", "{tmp}/" + LONG), 2,
         "a name of 300 bytes, longer than the 255", files=M),
    Kind("usage", "a 300-character --repro", _report("--repro", "{tmp}/" + LONG + ".py"), 2,
         "a name of 303 bytes", setup=a_finished_run),
]
BATTERY = [k.id for k in KINDS] + ["usage: a working directory that was deleted",
                                   "concurrency: two processes continue one stopped run: one each"]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.id)
def test_round_5_kind(kind, world, tmp_path, monkeypatch, capsys):
    battery.run_kind(kind, world, tmp_path, monkeypatch, capsys)   # (the kind's files as they were, among its checks)
    store = tmp_path / "kind" / "s.db"
    if kind.klass == "destinations" and store.exists():   # the store a destination named is sound
        assert main(["store", "check", "--store", str(store)]) == 0, capsys.readouterr()


def test_a_deleted_working_directory_is_one_line(world, tmp_path, monkeypatch, capsys):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    code = main([world.fill(a, tmp_path) for a in releases(store=str(tmp_path / "s.db"),
                                                           cache_dir=str(tmp_path / "cache"))])
    said = capsys.readouterr().err.strip()
    assert code == 2 and said.count("\n") == 0 and "the working directory no longer exists" in said, said
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "cache").exists()


CONTINUER = """import sys, time
from pathlib import Path
from bisector.store.run_record import RunRecord
from bisector.store.storage import RunKind, StepRow, Store
store = Store(sys.argv[1])
while not Path(sys.argv[2]).exists():   # both start together
    time.sleep(0.001)
record = RunRecord(store, RunKind.BISECT, ["bisector", "run"], {}, "hash0", "stopped1")
record.begin()
for seq in range(20):
    record.step(StepRow(run_id="x", seq=seq, candidate=sys.argv[3], verdict="good", value=1.0, seconds=0.0,
                        measurements=[]))
    time.sleep(0.05)   # (both at work at once: 1 s each)
print(record.run_id)
record.save("found")
store.close()
"""


def test_two_processes_continue_one_stopped_run_one_each(tmp_path):
    """The same command started twice at once, with a stopped run of its job in the store: each continues its own
    run (one takes the stopped run's id, the other a new one) and no run's log holds the other's steps. Tried
    five times (it is a race); before, both took the stopped run and its log held both processes' steps."""
    for attempt in range(5):
        path, go = tmp_path / f"s{attempt}.db", tmp_path / f"go{attempt}"
        store = Store(path)
        store.put_run(RunRow(id="stopped1", created=now(), updated=now(), kind=RunKind.BISECT, command=["bisector"],
                             config={}, config_hash="hash0", status="interrupted"))
        store.close()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        procs = [subprocess.Popen([sys.executable, "-c", CONTINUER, str(path), str(go), name], env=env,
                                  stdout=subprocess.PIPE, text=True) for name in ("first", "second")]
        go.write_text("")
        ids = [p.communicate(timeout=60)[0].strip() for p in procs]
        assert all(p.returncode == 0 for p in procs) and sorted(ids)[0] != sorted(ids)[1] and "stopped1" in ids, ids
        store = Store(path, read_only=True)
        for run_id, name in zip(ids, ("first", "second")):
            assert {s.candidate for s in store.steps(run_id)} == {name}, (run_id, name)
        store.close()
