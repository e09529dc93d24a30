"""Issue 34, left from round 3: a matrix run that measured every cell and then failed to write its report (a
directory appeared at ``--out``'s matrix.md during the run, past the preflight's check) is saved FAILED, exit 1 in
one line; no row of the store is left "running"."""
from __future__ import annotations

import datetime as dt

import pytest

from bisector.cli.main import main
from bisector.store.storage import RunKind, Store
from tests.support.pkgindex import LocalIndex, build_wheel

pytestmark = pytest.mark.slow
T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)


def test_a_matrix_run_refused_after_the_run_is_saved_failed(tmp_path, env_cache, plain_spec, capsys):
    idx = LocalIndex(tmp_path / "idx")
    for day, version in enumerate(["1.0.0", "1.2.0"]):
        idx.add(build_wheel(tmp_path / "w", "tinypkg", version), T0 + dt.timedelta(days=day))
    out = tmp_path / "out"
    config = tmp_path / "m.toml"
    # the probe itself plants the directory: the preflight saw none, the write after the run meets it
    config.write_text(f'[matrix]\nenv = "{plain_spec}"\n[matrix.grid]\ntinypkg = ["1.0.0", "1.2.0"]\n'
                      f'[probe]\ncmd = "mkdir -p {out}/matrix.md"\n')
    with idx.serve() as url:
        code = main(["matrix", "--config", str(config), "--out", str(out), "--index-url", url, "--store",
                     str(tmp_path / "s.db"), "--cache-dir", str(env_cache)])
    err = capsys.readouterr().err
    assert code == 1 and err.splitlines()[-1].endswith("out/matrix.md is a directory"), err
    store = Store(tmp_path / "s.db", read_only=True)
    assert [(r.kind, r.status) for r in store.list_runs()] == [(RunKind.MATRIX, "failed")]
    assert len(store.measurements_for("tinypkg")) == 2   # what was measured is kept
