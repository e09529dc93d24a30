"""``bisector matrix``: grid parsing and expansion, comparison rules, and end-to-end runs over a
loopback index (history, reuse, the planted step, exit codes, plots, the golden table, bisects)."""
from __future__ import annotations

import datetime as dt
import json
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
from tests.support.pkgindex import LocalIndex, build_wheel

HERE = Path(__file__).resolve().parent.parent   # tests/
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


def normalise(text: str) -> str:
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "<TIME>", text)
    text = re.sub(r"`[0-9a-f]{12}`", "`<RUN>`", text)
    return re.sub(r"\d+\.\d+ KiB", "<N> KiB", text)


def test_unreachable_index_is_nothing_measured_exit_3(tmp_path, plain_spec, capsys):
    config = write_config(tmp_path / "bisect.toml", plain_spec, 'tinypkg = "latest"')
    code = matrix_cli("--config", str(config), "--index-url", "http://127.0.0.1:9/simple/",
                      "--store", str(tmp_path / "s.db"), "--out", str(tmp_path / "out"))
    assert code == 3 and "nothing could be measured" in capsys.readouterr().err
