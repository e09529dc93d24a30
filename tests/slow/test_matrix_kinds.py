"""``log``, ``report`` and ``runs`` on every kind of run, in one store over a loopback index: a probe run,
a bisect, a diff and a matrix run, all real. "latest" is the latest finished run of any kind (and
``--kind`` the latest of one kind); an unfinished run has a log but no report."""
from __future__ import annotations

import datetime as dt
import json
import sqlite3
from pathlib import Path

import pytest

from bisector.cli.main import main
from bisector.store.storage import RunRow, RunState, Store
from tests.support.pkgindex import LocalIndex, build_wheel
from tests.unit.test_matrix import PROBE, tiny_source, write_config

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
SUM_KIB = Path(__file__).resolve().parent.parent / "probes" / "sum_kib.py"


@pytest.fixture(scope="module")
def store(tmp_path_factory, env_cache, plain_spec):
    """One store with, in this order: a probe run, a bisect, a diff, a matrix run."""
    root = tmp_path_factory.mktemp("kinds")
    idx = LocalIndex(root / "idx")
    for day, (version, kib) in enumerate([("1.0.0", 100), ("1.1.0", 100), ("1.2.0", 400)]):
        idx.add(build_wheel(root / "w", "tinypkg", version, module_source=tiny_source(kib)), T0 + dt.timedelta(days=day))
    for day, version in enumerate(["1.0", "2.0"]):
        idx.add(build_wheel(root / "w", "tinyextra", version, module_source=f"KIB = {100 * (day + 1)}\n"),
                T0 + dt.timedelta(days=day))
    db = str(root / "s.db")
    with idx.serve() as url:
        common = ["--index-url", url, "--env", str(plain_spec), "--store", db, "--cache-dir", str(env_cache)]
        codes = [main(["probe", "--with", "tinypkg==1.2.0", "--probe", str(PROBE), *common]),
                 main(["run", "--package", "tinypkg", "--good", "1.0.0", "--bad", "1.2.0", "--mode", "releases",
                       "--probe", str(PROBE), "--metric", "buffer_kib", "--max-increase", "50%", *common]),
                 main(["diff", "--with", "tinypkg==1.0.0", "--a-with", "tinyextra==1.0", "--b-with", "tinyextra==2.0",
                       "--probe", str(SUM_KIB), "--probe-arg=--modules=tinyextra", "--metric", "kib", *common]),
                 main(["matrix", "--config", str(write_config(root / "b.toml", plain_spec, 'tinypkg = ["1.0.0", "latest"]')),
                       "--out", str(root / "out"), "--index-url", url, "--store", db, "--cache-dir", str(env_cache)])]
    runs = {r.kind.value: r for r in Store(root / "s.db", read_only=True).list_runs()}
    return {"db": db, "codes": codes, "runs": runs}


def test_every_kind_is_listed_and_filtered(store, capsys):
    assert store["codes"] == [0, 0, 0, 1] and sorted(store["runs"]) == ["bisect", "diff", "matrix", "probe"]
    capsys.readouterr()
    assert main(["runs", "--store", store["db"]]) == 0
    header, *lines, total = capsys.readouterr().out.splitlines()
    assert header.split() == ["run", "config", "updated", "kind", "status", "what"]
    assert [line.split()[3] for line in lines] == ["probe", "bisect", "diff", "matrix"]
    assert total == "4 run(s): 1 bisect, 1 diff, 1 matrix, 1 probe"
    assert main(["runs", "--store", store["db"], "--kind", "probe"]) == 0
    _, line, total = capsys.readouterr().out.splitlines()
    assert line.startswith(store["runs"]["probe"].id) and line.endswith("tinypkg 1.2.0") and total == "1 run(s): 1 probe"


@pytest.mark.parametrize("kind, log_start, text_start", [
    ("probe", "# bisector probe {id}: tinypkg 1.2.0", "tinypkg==1.2.0: ok"),
    ("bisect", "# bisector run {id}: tinypkg good=1.0.0 bad=1.2.0", "First bad: tinypkg 1.2.0"),
    ("diff", "# bisector diff {id}: tinypkg 1.0.0, A against B", "The difference that matters at tinypkg 1.0.0"),
    ("matrix", "# bisector matrix {id}: tinypkg = 1.0.0, latest", "1 new step along the tinypkg versions"),
])
def test_log_and_report_work_on_every_kind(store, capsys, kind, log_start, text_start):
    run_id, db = store["runs"][kind].id, store["db"]
    capsys.readouterr()
    assert main(["log", run_id, "--store", db]) == 0
    assert capsys.readouterr().out.startswith(log_start.format(id=run_id))
    assert main(["log", "--kind", kind, "--store", db]) == 0          # the latest of its kind: this one
    assert capsys.readouterr().out.startswith(log_start.format(id=run_id))
    for fmt in ("text", "markdown", "json"):
        assert main(["report", run_id, "--format", fmt, "--store", db]) == 0, fmt
        shown = capsys.readouterr().out
        if fmt == "text":
            assert shown.startswith(text_start), shown[:300]
        elif fmt == "json":
            json.loads(shown)
        else:
            assert shown.startswith(("#", "**")), shown[:200]


def test_latest_is_the_latest_finished_bisect_or_of_the_kind_asked(store, capsys, tmp_path):
    capsys.readouterr()
    assert main(["log", "--store", store["db"]]) == 0   # no id: the latest finished bisect, and stderr says so
    out = capsys.readouterr()
    assert out.out.startswith("# bisector run ") and "the latest finished bisect run" in out.err
    assert main(["log", "--kind", "matrix", "--store", store["db"]]) == 0
    assert capsys.readouterr().out.startswith(f"# bisector matrix {store['runs']['matrix'].id}:")
    assert main(["report", "--format", "text", "--kind", "matrix", "--store", store["db"]]) == 0
    assert capsys.readouterr().out.startswith("1 new step along the tinypkg versions")
    copy = tmp_path / "s.db"
    with sqlite3.connect(store["db"]) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)   # the store's rows, those still in its write-ahead log included
    later = Store(copy)   # a run still going, newer than all: "latest" passes over it, its id has a log only
    later.put_run(RunRow(id="0123456789ab", created="2999-01-01T00:00:00+00:00", updated="2999-01-01T00:00:00+00:00",
                         kind="matrix", command=["bisector", "matrix"], config={"matrix": {"grid": {"tinypkg": "latest"}}},
                         status=RunState.RUNNING))
    later.close()
    assert main(["log", "--kind", "matrix", "--store", str(copy)]) == 0
    assert capsys.readouterr().out.startswith(f"# bisector matrix {store['runs']['matrix'].id}:")
    assert main(["log", "0123456789ab", "--store", str(copy)]) == 0
    assert capsys.readouterr().out == ("# bisector matrix 0123456789ab: tinypkg = latest\n# command: bisector matrix\n"
                                       "# status: running\n")
    assert main(["report", "0123456789ab", "--store", str(copy)]) == 2
    assert "run 0123456789ab (matrix) has not finished: running" in capsys.readouterr().err
    assert main(["log", "--kind", "bisect", "0123456789ab", "--store", str(copy)]) == 2
    assert "is a matrix run, not a bisect run" in capsys.readouterr().err
