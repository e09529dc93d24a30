"""No cell lost in silence: the one-line reasons, the invalid combinations the packages' metadata
declare (read from a loopback index: its metadata files, or the wheel through range requests), the
newest pinned release's date as a cell's date, a partial OOM as an OOM finding, and the exit codes."""
from __future__ import annotations

import datetime as dt

import pytest

from bisector.core.criterion import Criterion
from bisector.core.measurement import Measurement
from bisector.matrix.cells import Cell, Slot, _dated
from bisector.matrix.compare import compare, still_bad, summarise
from bisector.matrix.failure_line import failure_line, missing_metric_line, oom_line
from bisector.matrix.grid_result import CELLS_LOST, BaselineCell, CellResult, MatrixResult
from bisector.matrix.report_cells import counts, text_lines
from bisector.matrix.validity import Checker, conflict
from bisector.sources.dist_metadata import DistMetadata, applies, parse_metadata, read_metadata
from tests.support.pkgindex import LocalIndex, build_wheel

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
UV_CONFLICT = ("resolving/installing: error: No solution found when resolving dependencies | cause: Because "
               "transformers>=5.24.0 depends on huggingface-hub>=1.31.0,<3.0 and only huggingface-hub<=1.5.0 is "
               "available, we can conclude that transformers>=5.24.0 cannot be used. | And because you require "
               "transformers==5.24.0, we can conclude that your requirements are unsatisfiable.")
HEALTH = ("health check failed: _compare_versions(op, got_ver, want_ver, requirement, pkg, hint) | raise ImportError( "
          "| ImportError: accelerate>=0.20.3 is required for a normal functioning of this module, but found "
          "accelerate==0.20.0. | Try: pip install transformers -U or pip install -e '.[dev]'")


def _m(status: str, reason: str = "", metrics: dict | None = None, result: dict | None = None, key: str = "k"):
    return Measurement(key=key, package="p", candidate="1.0", env_fingerprint="e", probe_fingerprint="f",
                       status=status, reason=reason or None, seconds=1.0, metrics=metrics or {},
                       details={"result": result} if result else {})


@pytest.mark.parametrize("status, reason, line", [
    ("env-failed", UV_CONFLICT, "resolver conflict: transformers>=5.24.0 depends on huggingface-hub>=1.31.0,<3.0 "
                                "and only huggingface-hub<=1.5.0 is available"),
    ("env-failed", HEALTH, "import failed in the environment: ImportError: accelerate>=0.20.3 is required for a "
                           "normal functioning of this module, but found accelerate==0.20.0."),
    ("env-failed", "resolving/installing: error: No solution found | cause: Because tinymissing was not found in the "
                   "package registry and tinypkg==1.2.0 depends on tinymissing>=1, we can conclude that tinypkg==1.2.0 "
                   "cannot be used.", "resolver conflict: tinymissing was not found in the package registry and "
                                      "tinypkg==1.2.0 depends on tinymissing>=1"),
    ("crashed", "probe exited 1: RuntimeError: boom in probe", "crash: RuntimeError: boom in probe"),
    ("crashed", "probe error: no cell could be measured: precision not proved: bf16 requested, the forward ran in "
                "float32", "precision not proved: bf16 requested, the forward ran in float32"),
    ("oom", "probe error: no cell could be measured: OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
     "out of memory: OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"),
    ("timeout", "probe timed out after 30s", "probe timed out after 30s"),
    ("import-failed", "ModuleNotFoundError: No module named 'tinypkg'",
     "import failed: ModuleNotFoundError: No module named 'tinypkg'"),
])
def test_every_failure_is_one_line_that_names_its_cause(status, reason, line):
    assert failure_line(_m(status, reason)) == line


def test_a_long_reason_is_cut_and_the_missing_metric_names_the_failed_probe_cells():
    assert len(failure_line(_m("crashed", "probe exited 1: ValueError: " + "x" * 900))) == 240
    cells = [{"precision": "bf16", "ga": 2, "hidden": 256, "error": "precision not proved: no bf16 op ran"},
             {"precision": "fp32", "ga": 1, "hidden": 64}]
    assert missing_metric_line(_m("ok", result={"cells": cells}), "m") == (
        "metric m missing: 1 probe cell failed (first bf16.ga2.h256: precision not proved: no bf16 op ran)")
    absent = {"absent": {"step_peak_bytes": "the command stepped no optimizer (no optimizer.step() seen)"}}
    assert missing_metric_line(_m("ok", result=absent), "step_peak_bytes") == (
        "metric step_peak_bytes missing from the probe's result: the command stepped no optimizer (no "
        "optimizer.step() seen)")   # the probe's own reason
    assert oom_line(["fp32.ga2.h256", "bf16.ga2.h128", "bf16.ga2.h256"]) == (
        "out of memory at widths h128, h256 (fp32.ga2.h256, bf16.ga2.h128, bf16.ga2.h256)")


TRANSFORMERS_4_32_1 = DistMetadata(
    name="transformers", version="4.32.1", source="test",
    requires_dist=["huggingface-hub (<1.0,>=0.15.1)", "accelerate (>=0.20.3) ; extra == 'accelerate'",
                   "accelerate (>=0.20.3) ; extra == 'torch'", "torch (!=1.12.0,>=1.9) ; extra == 'torch'",
                   "pytest ; extra == 'dev'"],
    provides_extra=["accelerate", "torch", "dev"])
ACCELERATE_0_20_0 = DistMetadata(name="accelerate", version="0.20.0", source="test",
                                 requires_dist=["numpy (>=1.17)", "torch (>=1.6.0)", "transformers ; extra == 'dev'"],
                                 provides_extra=["dev"])


def test_declared_requirements_make_a_pair_invalid():
    said = conflict(TRANSFORMERS_4_32_1, "transformers", "accelerate", "0.20.0")
    assert said == "transformers 4.32.1 requires accelerate>=0.20.3 (in every extra that names it: accelerate, torch)"
    assert conflict(TRANSFORMERS_4_32_1, "transformers", "accelerate", "0.20.3") is None
    assert conflict(TRANSFORMERS_4_32_1, "transformers", "huggingface-hub", "1.2.0") == (
        "transformers 4.32.1 requires huggingface-hub<1.0,>=0.15.1")
    assert conflict(ACCELERATE_0_20_0, "accelerate", "transformers", "4.32.1") is None  # named without a bound
    mixed = TRANSFORMERS_4_32_1.model_copy(update={"requires_dist": [*TRANSFORMERS_4_32_1.requires_dist,
                                                                    "accelerate ; extra == 'dev'"]})
    assert conflict(mixed, "transformers", "accelerate", "0.20.0") is None   # one extra takes any accelerate


def test_one_reader_of_requirement_lines():
    """Requires-Dist as every reader takes it (a cell's validity, a nightly's pins, a torch base's closure): a
    line installers would refuse left out, markers evaluated for this interpreter or the markers given, an
    extra only when asked for; the body of the file is not read."""
    raw = (b"Metadata-Version: 2.1\nName: x\nVersion: 1.0\nRequires-Dist: a (==1.0)\nRequires-Dist: not one ((\n"
           b"Requires-Dist: b ; extra == 'dev'\nRequires-Dist: c ; python_version < '3'\n\nRequires-Dist: body\n")
    meta = parse_metadata(raw, "test")
    reqs = meta.requirements()
    assert (meta.name, meta.version, [r.name for r in reqs]) == ("x", "1.0", ["a", "b", "c"])
    assert [applies(r) for r in reqs] == [True, False, False]
    assert applies(reqs[1], "dev") and applies(reqs[2], markers={"python_version": "2.7"})


@pytest.mark.parametrize("core_metadata", [True, False], ids=["metadata file", "range requests"])
def test_metadata_is_read_from_the_index_and_cached(tmp_path, core_metadata):
    idx = LocalIndex(tmp_path / "idx", core_metadata=core_metadata)
    idx.add(build_wheel(tmp_path / "w", "tinyextra", "2.0.0", module_source="X = 1\n" * 5000,
                        dependencies=["tinypkg>=1.1; extra == 'tiny'", "numpy>=1.17"]), T0)
    idx.add(build_wheel(tmp_path / "w", "tinypkg", "1.0.0"), T0)
    with idx.serve() as url:
        meta = read_metadata(url, "tinyextra", "2.0.0", tmp_path / "cache")
        checker = Checker(url, tmp_path / "cache2")
        why = checker.why_invalid({"tinypkg": "1.0.0", "tinyextra": "2.0.0"})
    assert meta.requires_dist == ["tinypkg>=1.1; extra == 'tiny'", "numpy>=1.17"]
    assert meta.source == ("index metadata file" if core_metadata else "wheel (range requests)")
    assert why == "tinyextra 2.0.0 requires tinypkg>=1.1 (in its extra: tiny)"
    again = read_metadata("http://127.0.0.1:9/simple/", "tinyextra", "2.0.0", tmp_path / "cache",
                          page={"files": [{"filename": "tinyextra-2.0.0-py3-none-any.whl", "url": "x.whl",
                                           "hashes": {"sha256": idx.files("tinyextra")[0]["sha256"]}}]})
    assert again.source == "cache" and again.requires_dist == meta.requires_dist   # no request: the server is gone


def test_a_cell_resolves_as_of_its_newest_pinned_release():
    slots = [Slot(label="1.13.0", version="1.13.0", uploaded=T0),
             Slot(label="latest", version="5.24.0", uploaded=T0 + dt.timedelta(days=40))]
    [cell] = _dated([Cell(slots=slots)], [T0 + dt.timedelta(days=3)])
    assert cell.as_of == T0 + dt.timedelta(days=40)
    [pinned_newer] = _dated([Cell(slots=slots[:1])], [T0 + dt.timedelta(days=3)])
    assert pinned_newer.as_of == T0 + dt.timedelta(days=3)


CRIT = Criterion(metric="m", max_increase="20%")
OOM_RESULT = {"oom_cells": ["bf16.ga2.h256", "fp32.ga2.h256"], "cells": []}


def _cell_of(*ms: Measurement) -> CellResult:
    return summarise(Cell(slots=[Slot(label="latest", version="1.1.0")]), ["p"], list(ms), CRIT)


def test_a_partial_oom_is_an_oom_finding_with_its_widths():
    partial = _m("ok", metrics={"m": 1.0}, result=OOM_RESULT)
    cell = _cell_of(partial)
    assert cell.oom == ["bf16.ga2.h256", "fp32.ga2.h256"] and cell.bad_failure
    assert cell.reason == "out of memory at width h256 (bf16.ga2.h256, fp32.ga2.h256)"
    baseline = BaselineCell(versions={"p": "1.0.0"}, status="ok", metrics={"m": 1.0})
    judged = compare(cell, baseline, CRIT, exit_mode=False)
    assert judged.verdict == "regression"     # the value did not move: running out of memory is the regression
    assert still_bad(judged, [partial], CRIT, exit_mode=False) == (True, 1.0)
    assert still_bad(judged, [_m("ok", metrics={"m": 1.0})], CRIT, exit_mode=False)[0] is False
    known = baseline.model_copy(update={"oom": ["bf16.ga2.h256"]})
    assert compare(cell, known, CRIT, exit_mode=False).verdict == "same"   # the baseline ran out there too
    no_oom_rule = summarise(Cell(slots=[Slot(label="latest", version="1.1.0")]), ["p"], [partial],
                            Criterion(metric="m", max_increase="20%", oom_is_bad=False))
    assert not no_oom_rule.bad_failure and no_oom_rule.oom


def _run(*cells: CellResult, baseline: bool = True) -> MatrixResult:
    return MatrixResult(run_id="r", created="2024-03-01T00:00:00", grid_id="g", packages=["p"], grid={"p": ["1"]},
                        probe="x", criterion="c", criterion_metric="m", cells=list(cells),
                        baseline_run="b" if baseline else None)


def test_exit_codes_and_what_the_summary_says():
    base = BaselineCell(versions={"p": "1.0.0"}, status="ok", metrics={"m": 1.0})
    fine = compare(_cell_of(_m("ok", metrics={"m": 1.0})), base, CRIT, False)
    lost = compare(_cell_of(_m("env-failed", UV_CONFLICT)), base, CRIT, False)
    known = compare(_cell_of(_m("env-failed", UV_CONFLICT)), BaselineCell(versions={"p": "1.0.0"}, status="env-failed"),
                    CRIT, False)
    regressed = compare(_cell_of(_m("ok", metrics={"m": 2.0})), base, CRIT, False).model_copy(
        update={"confirmed": True})
    assert (lost.verdict, known.verdict) == ("lost", "failed")
    assert _run(fine).exit_code == 0 and _run(fine, known).exit_code == 0
    assert _run(fine, lost).exit_code == CELLS_LOST == 4
    assert _run(fine, lost, regressed).exit_code == 1   # a confirmed regression says more than a lost cell
    assert _run(lost, known).exit_code == 3             # nothing measured at all
    run = _run(fine, lost, known)
    assert counts(run) == "1 of 3 cells measured"
    lines = text_lines(run)
    assert lines[0] == ("  not measured: p==1.1.0 (latest): env-failed: resolver conflict: transformers>=5.24.0 "
                        "depends on huggingface-hub>=1.31.0,<3.0 and only huggingface-hub<=1.5.0 is available "
                        "(lost: the baseline measured it)")
    assert lines[1].endswith("(a known failure: the baseline could not measure it either)")
    first_night = compare(_cell_of(_m("crashed", "probe exited 1: boom")), None, CRIT, False)
    assert first_night.verdict == "lost" and _run(fine, first_night, baseline=False).exit_code == 4
