"""The matrix's history and steps as tables (pure, milliseconds): E-Divisive change points on synthetic
histories, the percent fallback, which change points are regressions and which are new, the exit
code they give, the steps along the versions within one run, and the HTML page's pieces."""
from __future__ import annotations

import json
import random

import pytest

from bisector.core.changepoints import e_divisive, percent_steps
from bisector.core.criterion import Criterion
from bisector.matrix.grid_report import headline
from bisector.matrix.html import night_charts, page, version_chart
from bisector.matrix.svg_chart import nice_ticks, svg, tick_texts
from bisector.matrix.grid_result import BisectAttachment, CellResult, HistoryMethod, MatrixResult
from bisector.matrix.steps import find_steps, mark_new
from bisector.matrix.trend import history_lines

CRIT = Criterion(metric="m", max_increase="5%")


def series(n: int, seed: int, step_at: int | None = None, size: float = 0.2, noise: float = 0.03) -> list[float]:
    """``n`` nights around 100 with +-``noise`` relative noise; +``size`` from index ``step_at`` on."""
    rng = random.Random(seed)
    return [100 * (1 + (size if step_at is not None and i >= step_at else 0)) * (1 + rng.uniform(-noise, noise))
            for i in range(n)]


def test_a_step_at_night_12_of_30_is_found_there():
    for seed in range(10):
        [found] = e_divisive(series(30, seed, step_at=11))       # nights 12..30 are 20% higher
        assert found.index + 1 == 12 and found.p_value <= 0.01
        assert found.before == pytest.approx(100, rel=0.03) and found.relative == pytest.approx(0.2, abs=0.03)


def test_pure_noise_yields_no_change_point():
    for seed in range(20):
        assert e_divisive(series(30, 100 + seed)) == []


def test_two_steps_and_a_small_history():
    both = e_divisive(series(45, 7, step_at=15) [:30] + [v * 0.8 for v in series(15, 8)])
    assert [c.index for c in both] == [15, 30]
    assert e_divisive([1.0, 2.0, 3.0]) == []                 # too short for two sides of three
    assert [c.index for c in percent_steps([100, 101, 130, 131], 0.1)] == [2]


def result_of(run: int, values: dict[str, float], created: str | None = None, **extra) -> MatrixResult:
    cells = [CellResult(key=key, labels=[key], versions={"pkg": version}, status="ok", metrics={"m": value})
             for key, (version, value) in values.items()]
    return MatrixResult(run_id=f"run{run:02d}", created=created or f"2025-01-{run + 1:02d}T00:00:00+00:00",
                        grid_id="g", packages=["pkg"], grid={"pkg": list(values)}, probe="p", criterion="c",
                        criterion_metric="m", metrics=["m"], cells=cells, **extra)


def nights(values: list[float]) -> list[MatrixResult]:
    return [result_of(i, {"latest": (f"1.{i}.0", v)}) for i, v in enumerate(values)]


def test_history_change_points_are_regressions_and_new_once():
    runs = nights(series(30, 3, step_at=11))
    [line] = history_lines(runs[:-1], runs[-1], CRIT)
    assert line.method is HistoryMethod.E_DIVISIVE and len(line.nights) == 30
    [change] = line.changes
    assert (change.night, change.run_id, change.regression, change.new) == (12, "run11", True, True)
    assert change.versions == {"pkg": "1.11.0"}
    now = runs[-1].model_copy(update={"history_lines": [line]})
    assert now.exit_code == 1 and now.new_changes == [(line, change)]
    # the next night: an earlier run reported it, so it is known (no second alarm)
    later = result_of(30, {"latest": ("1.30.0", 120.0)}, baseline_run="run29")
    [again] = history_lines([*runs[:-1], now], later, CRIT)
    assert [c.new for c in again.changes] == [False]
    assert later.model_copy(update={"history_lines": [again]}).exit_code == 0
    # ... and its headline says the known change is still there, not "No regression" under a ringed step
    assert headline(later.model_copy(update={"history_lines": [again]})) == \
        "No new regression; 1 known change point in the history"
    assert headline(later) == "No regression"


def test_improvements_short_histories_and_rules_without_a_threshold():
    faster = nights([v * 0.8 if i >= 12 else v for i, v in enumerate(series(30, 4))])
    [line] = history_lines(faster[:-1], faster[-1], CRIT)
    assert [c.regression for c in line.changes] == [False]
    short = nights([100, 101, 99, 125])
    [line] = history_lines(short[:-1], short[-1], CRIT)
    assert line.method is HistoryMethod.PERCENT and [(c.night, c.p_value) for c in line.changes] == [(4, None)]
    small = nights(series(30, 5, step_at=11, size=0.04, noise=0.005))   # significant, but under the 5% rule
    [line] = history_lines(small[:-1], small[-1], CRIT)
    assert [c.regression for c in line.changes] == [False]
    [line] = history_lines(small[:-1], small[-1], Criterion(metric="m"))  # no rule: any worse shift counts
    assert [c.regression for c in line.changes] == [True]


def grid(values: dict[tuple[str, str], float]) -> MatrixResult:
    cells = [CellResult(key=f"{a} | {b}", labels=[a, b], versions={"acc": a, "tf": b}, status="ok", metrics={"m": v})
             for (a, b), v in values.items()]
    return MatrixResult(run_id="r", created="2025-01-01T00:00:00+00:00", grid_id="g", packages=["acc", "tf"],
                        grid={}, probe="p", criterion="c", criterion_metric="m", metrics=["m"], cells=cells)


def test_steps_along_the_versions_on_each_grid_line():
    now = grid({("0.27.2", "4.38.2"): 0.0, ("0.28.0", "4.38.2"): 1.244, ("0.29.0", "4.38.2"): 1.244,
                ("0.27.2", "4.40.0"): 1.0, ("0.28.0", "4.40.0"): 1.0})
    crit = Criterion(metric="m", threshold=0.5)
    [step] = find_steps(now, crit)
    assert (step.line, step.good, step.bad, step.good_value, step.bad_value) == (
        "tf==4.38.2", "0.27.2", "0.28.0", 0.0, 1.244)
    assert step.new and step.threshold == 0.5
    confirmed = step.model_copy(update={"confirmed": True})
    [known] = mark_new([step], now.model_copy(update={"version_steps": [confirmed]}))
    assert known.new is False
    moved_on = confirmed.model_copy(update={"bad": "0.29.0"})   # latest moved past it: the same step
    assert mark_new([step], now.model_copy(update={"version_steps": [moved_on]}))[0].new is False
    assert mark_new([step], now.model_copy(update={"version_steps": [step]}))[0].new is True  # not confirmed then
    assert find_steps(now, Criterion(metric="m")) == []       # no rule: nothing crosses
    assert now.model_copy(update={"version_steps": [step.model_copy(update={"confirmed": True})]}).exit_code == 1


def test_page_pieces_plot_nights_and_versions_and_link_the_bisects(tmp_path):
    runs = nights(series(12, 6, step_at=6))
    [line] = history_lines(runs[:-1], runs[-1], CRIT)
    now = runs[-1].model_copy(update={"history_lines": [line]})
    [chart] = night_charts(now, "m")
    assert chart.title == "m of each cell over 12 nights (change points: E-Divisive means)"
    short = nights([100, 101, 99, 125])
    [few] = history_lines(short[:-1], short[-1], CRIT)
    [chart4] = night_charts(short[-1].model_copy(update={"history_lines": [few]}), "m")
    assert chart4.title == "m of each cell over 4 nights (change points: % against the previous night)"   # not a unit
    assert len(chart.labels) == 12 and chart.series[0].marks == [(6, f"{line.changes[0].relative:+.1%} new")]
    drawn = svg(chart)
    assert drawn.startswith('<svg class="plot"') and drawn.count('<circle class="point"') == 12
    assert drawn.count('class="change-point mark-ring"') == 2          # the mark, and its legend entry
    now = grid({("0.27.2", "4.38.2"): 0.0, ("0.28.0", "4.38.2"): 1.244})
    [versions] = version_chart(now, "m")
    assert versions.steps and " H" in svg(versions)            # steps between releases, never a slope
    attached = BisectAttachment(package="acc", good="0.27.2", bad="0.28.0", status="found", first_bad="0.28.0",
                                report_file="bisect-acc-0.27.2-0.28.0.md", markdown="# report\n")
    text = page(now.model_copy(update={"bisects": [attached]}),
                ['<a class="bisect-report" href="bisect-acc-0.27.2-0.28.0.md">x</a>'])
    assert text.startswith("<!DOCTYPE html>") and "bisect-acc-0.27.2-0.28.0.md" in text and "<script" not in text


def test_ticks_are_round_in_the_metric_unit():
    assert nice_ticks(0.0, 1.244) == [0.0, 0.5, 1.0, 1.5]
    assert tick_texts([0.0, 0.5, 1.0, 1.5], "ga_excess_bytes_per_param")[-1] == "1.500 B/param"
    gib = float(1 << 30)
    assert tick_texts([3 * gib, 3.5 * gib, 4 * gib], "peak_bytes", gib) == ["3.00 GiB", "3.50 GiB", "4.00 GiB"]
    assert len(set(tick_texts(nice_ticks(1.2440, 1.2441), "ga_excess_bytes_per_param"))) == 5  # never two alike


def test_a_matrix_step_of_a_derived_cost_says_what_the_peaks_did():
    from bisector.matrix.report_trend import markdown_sections
    from tests.unit.test_report import GOOD_SLOPES, ga_side
    metric = "ga_excess_bytes_per_param"
    bad_slopes = {**GOOD_SLOPES, ("bf16", 1): GOOD_SLOPES[("bf16", 1)] - 1.896,
                  ("fp32", 1): GOOD_SLOPES[("fp32", 1)] - 0.652}
    (good, _), (bad, _) = ga_side(GOOD_SLOPES, "m0.backward"), ga_side(bad_slopes, "m0.backward")
    cells = [CellResult(key=k, labels=[k], versions={"acc": v}, status="ok", metrics=m)
             for k, v, m in (("acc 0.27.2", "0.27.2", good), ("acc 0.28.0", "0.28.0", bad))]
    now = MatrixResult(run_id="r", created="2025-01-01T00:00:00+00:00", grid_id="g", packages=["acc"], grid={},
                       probe="ga_memory", criterion="c", criterion_metric=metric, metrics=[metric], cells=cells)
    [step] = find_steps(now, Criterion(metric=metric, threshold=0.5))
    text = "\n".join(markdown_sections(now.model_copy(update={"version_steps": [step]})))
    assert "the GA=1 peaks fell (bf16 -1.896 B/param, fp32 -0.652 B/param), the GA=2 peaks did not change; no peak rose" \
        in text.replace("\\", "")


def test_a_baseline_regression_and_its_draft_say_what_the_peaks_did(tmp_path):
    """The step's peaks ride on the step, the regressed cell and the draft: matrix.json, the verdict cell of
    matrix.md, the terminal line, the draft's title and its "Found as" line all say that no peak rose."""
    from bisector.matrix.compare import compare
    from bisector.matrix.draft_text import text, title
    from bisector.matrix.grid_config import MatrixConfig
    from bisector.matrix.grid_report import JSON_FILE, render_text, table, write_reports
    from bisector.matrix.grid_result import BaselineCell
    from bisector.matrix.issue_drafts import track
    from bisector.store.storage import Store
    from tests.unit.test_report import GOOD_SLOPES, ga_side
    metric, said = "ga_excess_bytes_per_param", "the GA=1 peaks fell (bf16 -1.896 B/param, fp32 -0.652 B/param)"
    bad_slopes = {**GOOD_SLOPES, ("bf16", 1): GOOD_SLOPES[("bf16", 1)] - 1.896,
                  ("fp32", 1): GOOD_SLOPES[("fp32", 1)] - 0.652}
    (good, _), (bad, _) = ga_side(GOOD_SLOPES, "m0.backward"), ga_side(bad_slopes, "m0.backward")
    crit = Criterion(metric=metric, threshold=0.5)
    cell = CellResult(key="latest", labels=["latest"], versions={"acc": "0.28.0"}, status="ok", metrics=bad)
    judged = compare(cell, BaselineCell(versions={"acc": "0.27.2"}, status="ok", metrics=good), crit, exit_mode=False)
    assert judged.verdict == "regression" and judged.peaks.startswith(said) and judged.peaks.endswith("; no peak rose")
    judged = judged.model_copy(update={"confirmed": True})
    now = MatrixResult(run_id="r", created="2025-01-02T00:00:00+00:00", grid_id="g", packages=["acc"], grid={},
                       probe="ga_memory", criterion="c", criterion_metric=metric, metrics=[metric], cells=[judged],
                       baseline_run="r0", baseline_created="2025-01-01T00:00:00")
    assert said in table(now)[-1].replace("\\", "") and said in render_text(now, {})
    paths = write_reports(now, tmp_path / "out", tmp_path / "issues")
    assert json.loads(paths["json"].read_text())["cells"][0]["peaks"] == judged.peaks and paths["json"].name == JSON_FILE
    [draft] = track([], now, crit)
    assert title(draft) == ("acc 0.28.0: ga_excess_bytes_per_param 0.000 B/param → 1.244 B/param: the GA=1 peaks "
                            "fell, the GA=2 peaks did not change; no peak rose")
    config = MatrixConfig.model_validate({"matrix": {"grid": {"acc": ["latest"]}}, "probe": {"name": "ga_memory"}})
    md = text(draft, now, config, Store(tmp_path / "s.db")).replace("\\", "")
    found = next(line for line in md.splitlines() if line.startswith("Found as"))
    assert f"1.244 B/param at 0.28.0: {said}" in found and found.count("no peak rose") == 1
