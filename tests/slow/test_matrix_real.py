"""The slow half of tests/unit/test_matrix.py: its tests that build real environments and run real probes."""
from __future__ import annotations

import datetime as dt
import json
import os
from bisector.store.storage import Store
from tests.support.pkgindex import LocalIndex, build_wheel

from tests.unit.test_matrix import GOLDEN, PNG_SIGNATURE, T0, matrix_cli, normalise, scenario, tiny_source, write_config  # noqa: F401 (helpers and fixtures)


def test_history_is_stored_and_unchanged_cells_are_reused(scenario):
    first, second, third = scenario["first"], scenario["second"], scenario["third"]
    assert first["code"] == 0 and first["out"]["probes_run"] == 2 and first["out"]["baseline_run"] is None
    assert second["code"] == 0 and second["out"]["probes_run"] == 0 and second["out"]["measurements_reused"] == 2
    assert [c["verdict"] for c in second["out"]["cells"]] == ["same", "same"]
    assert all(c["reused"] for c in second["out"]["cells"])
    assert second["out"]["baseline_run"] == first["out"]["run_id"]
    assert third["out"]["baseline_run"] == second["out"]["run_id"] and third["out"]["history"] == 2
    store = Store(scenario["root"] / "s.db")
    rows = {r.id: r for r in store.list_runs() if r.kind == "matrix"}
    row = rows[third["out"]["run_id"]]
    assert row.status == "done" and row.result["cells"][1]["metrics"]["buffer_kib"] == 400
    keys = row.result["cells"][1]["measurements"]
    assert len(keys) == 2 and all(store.get_measurement(k).status == "ok" for k in keys)  # probe + confirmation
    store.close()


def test_planted_step_is_a_confirmed_regression_exit_1(scenario):
    third = scenario["third"]
    assert third["code"] == 1 and third["out"]["exit_code"] == 1
    same, moved = third["out"]["cells"]
    assert same["verdict"] == "same" and same["versions"] == {"tinypkg": "1.0.0"}
    assert moved["key"] == "latest" and moved["baseline"]["versions"] == {"tinypkg": "1.3.0"}
    assert moved["versions"] == {"tinypkg": "1.5.0"} and moved["verdict"] == "regression"
    assert moved["confirmed"] is True and moved["threshold"] == 150 and moved["confirm_value"] == 400
    # the new cell and its confirmation, and both cells of the step along the versions, re-measured
    assert third["out"]["probes_run"] == 4
    [step] = third["out"]["version_steps"]
    assert (step["good"], step["bad"], step["confirmed"], step["new"]) == ("1.0.0", "1.5.0", True, True)
    assert step["good_value"] == 100 and step["bad_value"] == 400 and step["confirm_values"] == [100, 400]


def test_plot_is_a_valid_png(scenario):
    import matplotlib.image
    png = scenario["third"]["dir"] / "plot-buffer_kib.png"
    assert png.stat().st_size > 5000 and png.read_bytes()[:8] == PNG_SIGNATURE
    pixels = matplotlib.image.imread(png)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100 and pixels.std() > 0
    assert "](plot-buffer_kib.png)" in (scenario["third"]["dir"] / "matrix.md").read_text()


def test_markdown_table_matches_golden(scenario):
    text = normalise((scenario["third"]["dir"] / "matrix.md").read_text())
    if os.environ.get("BISECTOR_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_bisect_on_regression_attaches_a_report_naming_the_first_bad(scenario):
    run = scenario["bisect"]
    assert run["code"] == 1
    # the regression against the baseline (1.3.0 -> 1.5.0), then the step along the versions (1.0.0 -> 1.5.0)
    attached, along = run["out"]["bisects"]
    assert (attached["package"], attached["good"], attached["bad"]) == ("tinypkg", "1.3.0", "1.5.0")
    assert attached["status"] == "found" and attached["first_bad"] == "1.4.0" and attached["last_good"] == "1.3.0"
    assert (along["good"], along["bad"], along["status"], along["first_bad"]) == ("1.0.0", "1.5.0", "found", "1.4.0")
    report = (run["dir"] / "matrix.md").read_text()
    assert "## Bisect: tinypkg 1.3.0 -> 1.5.0" in report and "First bad: tinypkg `1.4.0`" in report
    assert (run["dir"] / attached["report_file"]).read_text() == attached["markdown"]


def test_nothing_measured_exit_3(scenario):
    crash = scenario["crash"]
    assert crash["code"] == 3 and crash["out"]["baseline_run"] is None  # another probe: another grid
    assert {c["status"] for c in crash["out"]["cells"]} == {"crashed"}


def test_two_package_grid_with_exclude_pins_companions(tmp_path, env_cache, plain_spec, monkeypatch, capsys):
    idx = LocalIndex(tmp_path / "idx")
    for day, version in enumerate(["1.0.0", "1.1.0"]):
        wheel = build_wheel(tmp_path / "w", "tinypkg", version, module_source=tiny_source(100))
        idx.add(wheel, T0 + dt.timedelta(days=day))
    for day, version in enumerate(["1.0.0", "2.0.0"]):
        idx.add(build_wheel(tmp_path / "w", "tinyextra", version, module_source=f"LEVEL = {version[0]}\n"),
                T0 + dt.timedelta(days=day))
    probe = tmp_path / "probe.py"
    probe.write_text("import json, os, tinypkg, tinyextra\n"
                     "metrics = {'buffer_kib': float(tinypkg.BUFFER_KIB), 'extra_level': float(tinyextra.LEVEL),\n"
                     "           'gpu': float(os.environ.get('CUDA_VISIBLE_DEVICES') or -1)}\n"
                     "json.dump({'metrics': metrics}, open(os.environ['BISECTOR_RESULT'], 'w'))\n")
    extra = 'exclude = [{tinypkg = "1.0.0", tinyextra = ">=2"}]\nmetrics = ["buffer_kib", "extra_level", "gpu"]'
    grid = 'tinypkg = ["1.0.0", "1.1.0"]\ntinyextra = "latest-2"'
    config = write_config(tmp_path / "bisect.toml", plain_spec, grid, extra=extra, probe=probe)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # two "GPUs": one probe each, a single id per probe
    args = ["--config", str(config), "--store", str(tmp_path / "s.db"), "--cache-dir", str(env_cache),
            "--out", str(tmp_path / "out"), "--json"]
    with idx.serve() as url:
        code = matrix_cli(*args, "--index-url", url, "--jobs", "2")
        out = json.loads(capsys.readouterr().out)
        again_code = matrix_cli(*args, "--index-url", url)  # one probe at a time now: the same cells, reused
        again = json.loads(capsys.readouterr().out)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPUs: another device kind, measured anew
        on_cpu = matrix_cli(*args, "--index-url", url, "--baseline", out["run_id"])
        cpu = json.loads(capsys.readouterr().out)
    assert code == 0 and out["excluded"] == 1 and out["packages"] == ["tinypkg", "tinyextra"]
    cells = [(c["labels"], c["versions"]["tinyextra"], c["metrics"]["extra_level"]) for c in out["cells"]]
    assert cells == [(["1.0.0", "latest~1"], "1.0.0", 1.0), (["1.1.0", "latest~1"], "1.0.0", 1.0),
                     (["1.1.0", "latest"], "2.0.0", 2.0)]
    assert {c["metrics"]["gpu"] for c in out["cells"]} <= {0.0, 1.0}
    table = (tmp_path / "out" / "matrix.md").read_text()
    assert "| tinypkg | tinyextra | buffer\\_kib | extra\\_level | gpu | verdict |" in table
    assert "| 1.1.0 | 2.0.0 (latest) | 100.0 KiB | 2 |" in table
    assert again_code == 0 and again["probes_run"] == 0  # which GPU a probe got does not change the keys
    assert {c["verdict"] for c in again["cells"]} == {"same"}
    assert cpu["probes_run"] == 3 and {c["metrics"]["gpu"] for c in cpu["cells"]} == {-1.0} and on_cpu in (0, 1)
