"""``bisector matrix``: grid parsing and expansion, comparison rules, and end-to-end runs over a
loopback index (history, reuse, the planted step, exit codes, plots, the golden table, bisects)."""
from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path

import pytest

from bisector.cli.main import main
from bisector.core.criterion import Criterion
from bisector.errors import UsageError
from bisector.matrix.cells import build_cells, expand_axis
from bisector.matrix.compare import compare
from bisector.matrix.grid_config import MatrixSection
from bisector.matrix.grid_result import BaselineCell, CellResult
from bisector.sources.index import Release
from bisector.storage import Store
from tests.support.pkgindex import LocalIndex, build_wheel

HERE = Path(__file__).resolve().parent
PROBE = HERE / "probes" / "tiny_memory.py"
GOLDEN = HERE / "golden" / "matrix.md"
T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def matrix_cli(*argv: str) -> int:
    """``bisector matrix ARGV`` in-process, through the CLI's entry point."""
    return main(["matrix", *argv])


def tiny_source(kib: int, extra: str = "") -> str:
    return f"BUFFER_KIB = {kib}\n{extra}\ndef step():\n    return len(bytearray(BUFFER_KIB * 1024))\n"


def write_config(path: Path, spec: Path, grid: str, extra: str = "", probe: Path = PROBE) -> Path:
    path.write_text(f'[matrix]\nenv = "{spec}"\n{extra}\n[matrix.grid]\n{grid}\n'
                    f'[probe]\npath = "{probe}"\n\n[criterion]\nmetric = "buffer_kib"\nmax_increase = "50%"\n')
    return path


# -- fast: parsing, expansion, comparison --------------------------------------------------------

def _releases(*versions: str, yanked: tuple = ()) -> list[Release]:
    return [Release(version=v, uploaded=T0 + dt.timedelta(days=i), yanked=v in yanked) for i, v in enumerate(versions)]


def test_latest_n_expansion_skips_prereleases_and_yanked():
    rels = _releases("1.0.0", "1.1.0", "1.2.0", "1.3.0rc1", "1.3.0", "1.4.0", yanked=("1.4.0",))
    slots = expand_axis("tinypkg", ["1.0", "latest-3"], rels)
    assert [(s.label, s.version) for s in slots] == [("1.0.0", "1.0.0"), ("latest~2", "1.1.0"),
                                                      ("latest~1", "1.2.0"), ("latest", "1.3.0")]
    assert [s.version for s in expand_axis("tinypkg", ["latest"], rels, pre=True)] == ["1.4.0"]
    assert [s.version for s in expand_axis("tinypkg", ["latest-9"], rels[:2])] == ["1.0.0", "1.1.0"]
    with pytest.raises(UsageError, match=r"version 1.9 does not exist \(nearest: "):
        expand_axis("tinypkg", ["1.9"], rels)


def test_cross_product_with_exclude_keeps_grid_order():
    section = MatrixSection(grid={"TinyPkg": ["1.0.0", "1.1.0"], "tinyextra": "latest-2"},
                            exclude=[{"tinypkg": "1.0.0", "tinyextra": ">=2"}])
    assert section.packages == ["tinypkg", "tinyextra"]
    axes = {"tinypkg": expand_axis("tinypkg", ["1.0.0", "1.1.0"], _releases("1.0.0", "1.1.0")),
            "tinyextra": expand_axis("tinyextra", ["latest-2"], _releases("1.0.0", "2.0.0"))}
    cells, dropped = build_cells(section, axes)
    assert dropped == 1
    assert [c.versions(section.packages) for c in cells] == [
        {"tinypkg": "1.0.0", "tinyextra": "1.0.0"}, {"tinypkg": "1.1.0", "tinyextra": "1.0.0"},
        {"tinypkg": "1.1.0", "tinyextra": "2.0.0"}]
    assert cells[2].key == "1.1.0 | latest"


def _cell(value=None, status="ok", versions=None) -> CellResult:
    return CellResult(key="latest", labels=["latest"], versions=versions or {"p": "2.0"}, status=status,
                      metrics={} if value is None else {"m": value}, bad_failure=status == "oom")


@pytest.mark.parametrize("criterion, base, now, verdict", [
    (dict(max_increase="20%"), 100.0, 125.0, "regression"),
    (dict(max_increase="20%"), 100.0, 110.0, "moved"),
    (dict(max_increase="20%"), 100.0, 100.0, "same"),
    (dict(max_increase="10", direction="decrease"), 100.0, 80.0, "regression"),
    (dict(threshold=150.0), 100.0, 200.0, "regression"),
    (dict(threshold=150.0), 160.0, 200.0, "moved"),           # already beyond: not a new crossing
    (dict(threshold=150.0, noise=60.0), 100.0, 200.0, "moved"),  # inside the noise band
])
def test_compare_rules(criterion, base, now, verdict):
    crit = Criterion(metric="m", **criterion)
    baseline = BaselineCell(versions={"p": "1.0"}, status="ok", metrics={"m": base})
    assert compare(_cell(now), baseline, crit, exit_mode=False).verdict == verdict


def test_compare_failures_and_first_runs():
    crit = Criterion(metric="m", max_increase="20%")
    baseline = BaselineCell(versions={"p": "1.0"}, status="ok", metrics={"m": 1.0})
    assert compare(_cell(status="oom"), baseline, crit, False).verdict == "regression"
    assert compare(_cell(status="crashed"), baseline, crit, False).verdict == "lost"     # measured last night
    failed_before = BaselineCell(versions={"p": "1.0"}, status="env-failed")
    assert compare(_cell(status="crashed"), failed_before, crit, False).verdict == "failed"  # a known failure
    assert compare(_cell(status="crashed"), None, crit, False).verdict == "lost"  # never measured by any run
    assert compare(_cell(value=None), baseline, crit, False).verdict == "lost"    # ran, but without the metric
    assert compare(_cell(5.0), None, crit, False).verdict == "new"
    assert compare(_cell(5.0), baseline, crit, False).moved_packages == ["p"]
    exit_base = BaselineCell(versions={"p": "1.0"}, status="exit-code", exit_code=0)
    now = _cell(status="exit-code").model_copy(update={"exit_code": 1})
    assert compare(now, exit_base, Criterion(), exit_mode=True).verdict == "regression"


@pytest.mark.parametrize("body, message", [
    ('[matrix]\ncolour = "x"\n[matrix.grid]\ntinypkg = ["1.0"]\n', r"matrix\.colour: unknown key"),
    ('[matrix.grid]\ntinypkg = ["latest-0"]\n', r"latest-N needs N >= 1"),
    ('[matrix.grid]\ntinypkg = ["one"]\n', r"'one' is not a version, 'latest' or 'latest-N'"),
    ('[matrix]\nexclude = [{other = "1.0"}]\n[matrix.grid]\ntinypkg = "latest"\n', r"exclude names other"),
    ('[matrix.grid]\ntinypkg = "latest"\n[matrix.pins]\ntinypkg = "1.0"\n', r"both in the grid and pinned"),
    ('[matrix.grid]\ntinypkg = "latest"\n[criterion]\nmetric = "m"\nauto = true\n', r"auto is not supported"),
    ('[matrix.grid]\ntinypkg = "latest"\n[criterion]\nmetric = "m"\ncompare = "stats"\n', r"stats is for bisects"),
    ('[job]\npackage = "x"\n', r"no \[matrix\] table"),
    ('[matrix\n', r"not valid TOML"),
])
def test_bad_matrix_config_is_one_line_exit_2(tmp_path, capsys, body, message):
    config = tmp_path / "bisect.toml"
    config.write_text(body)
    assert matrix_cli("--config", str(config), "--store", str(tmp_path / "s.db"), "--out", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("bisector: error: ")
    assert not (tmp_path / "matrix.md").exists()


def test_bad_flag_and_unknown_baseline_exit_2(tmp_path, capsys):
    assert matrix_cli("--jobs", "many") == 2
    config = write_config(tmp_path / "b.toml", tmp_path / "none.toml", 'tinypkg = "latest"')
    (tmp_path / "none.toml").write_text('name = "plain"\nbase = "current"\n')
    assert matrix_cli("--config", str(config), "--store", str(tmp_path / "s.db"), "--baseline", "abc") == 2
    assert "--baseline abc: no finished matrix run" in capsys.readouterr().err


# -- slow: end to end over a loopback index --------------------------------------------------------

def _publish(idx: LocalIndex, wheels: Path, version: str, day: int) -> None:
    kib = 400 if version >= "1.4.0" else 100  # the planted step: 1.4.0
    idx.add(build_wheel(wheels, "tinypkg", version, module_source=tiny_source(kib)), T0 + dt.timedelta(days=day))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, env_cache, plain_spec):
    """Run 1 and 2 over 1.0.0..1.3.0, then 1.4.0 (the step) and 1.5.0 are published and run 3 follows."""
    root = tmp_path_factory.mktemp("matrix")
    idx = LocalIndex(root / "idx")
    for day, version in enumerate(["1.0.0", "1.1.0", "1.2.0", "1.3.0"]):
        _publish(idx, root / "w", version, day)
    config = write_config(root / "bisect.toml", plain_spec, 'tinypkg = ["1.0.0", "latest"]',
                          extra='metrics = ["buffer_kib", "peak_bytes"]')
    with idx.serve() as url:
        common = ["--config", str(config), "--index-url", url, "--store", str(root / "s.db"),
                  "--cache-dir", str(env_cache)]

        def run(name: str, *extra: str) -> dict:
            code = matrix_cli(*common, "--out", str(root / name), *extra)
            out = json.loads((root / name / "matrix.json").read_text()) if (root / name).is_dir() else None
            return {"code": code, "out": out, "dir": root / name}

        runs = {"first": run("first"), "second": run("second")}
        _publish(idx, root / "w", "1.4.0", 4)
        _publish(idx, root / "w", "1.5.0", 5)
        runs["third"] = run("third")
        runs["bisect"] = run("bisect", "--baseline", runs["first"]["out"]["run_id"], "--bisect-on-regression")
        crash = root / "crash.py"
        crash.write_text("raise SystemExit(1)\n")
        runs["crash"] = run("crash", "--probe", str(crash))
        yield {"root": root, "common": common, **runs}


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_plot_is_a_valid_png(scenario):
    import matplotlib.image
    png = scenario["third"]["dir"] / "plot-buffer_kib.png"
    assert png.stat().st_size > 5000 and png.read_bytes()[:8] == PNG_SIGNATURE
    pixels = matplotlib.image.imread(png)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100 and pixels.std() > 0
    assert "](plot-buffer_kib.png)" in (scenario["third"]["dir"] / "matrix.md").read_text()


def normalise(text: str) -> str:
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "<TIME>", text)
    text = re.sub(r"`[0-9a-f]{12}`", "`<RUN>`", text)
    return re.sub(r"\d+\.\d+ KiB", "<N> KiB", text)


@pytest.mark.slow
def test_markdown_table_matches_golden(scenario):
    text = normalise((scenario["third"]["dir"] / "matrix.md").read_text())
    if os.environ.get("BISECTOR_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


@pytest.mark.slow
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


@pytest.mark.slow
def test_nothing_measured_exit_3(scenario):
    crash = scenario["crash"]
    assert crash["code"] == 3 and crash["out"]["baseline_run"] is None  # another probe: another grid
    assert {c["status"] for c in crash["out"]["cells"]} == {"crashed"}


@pytest.mark.slow
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
    assert "| 1.1.0 | 2.0.0 (latest) | 100 | 2 |" in table
    assert again_code == 0 and again["probes_run"] == 0  # which GPU a probe got does not change the keys
    assert {c["verdict"] for c in again["cells"]} == {"same"}
    assert cpu["probes_run"] == 3 and {c["metrics"]["gpu"] for c in cpu["cells"]} == {-1.0} and on_cpu in (0, 1)


def test_unreachable_index_is_nothing_measured_exit_3(tmp_path, plain_spec, capsys):
    config = write_config(tmp_path / "bisect.toml", plain_spec, 'tinypkg = "latest"')
    code = matrix_cli("--config", str(config), "--index-url", "http://127.0.0.1:9/simple/",
                      "--store", str(tmp_path / "s.db"), "--out", str(tmp_path / "out"))
    assert code == 3 and "nothing could be measured" in capsys.readouterr().err
