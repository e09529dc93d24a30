"""Steps along the versions within one run: on each grid line (the other packages' versions fixed),
every cell is compared with its neighbour one version older on the candidate's axis, by the same
criterion as against the baseline (the older cell plays the good endpoint). A crossing is re-measured
(both cells, a new repeat index) and confirmed when it still crosses; it is new when the baseline
run did not have it. So a first run already says that 0.28.0 costs 1.244 B/param where 0.27.2 cost 0."""
from __future__ import annotations

from typing import Callable, Optional

from packaging.version import Version

from bisector.core.criterion import Criterion
from bisector.core.measurement import Measurement, metric_value
from bisector.matrix.cells import Cell
from bisector.matrix.compare import beyond, compare
from bisector.matrix.grid_result import BaselineCell, CellResult, CellVerdict, MatrixResult, VersionStep
from bisector.matrix.peaks_said import peaks_said

STEP_REPEAT_OFFSET = 1   # re-measurements of a step take repeat max_repeats + 1 (the baseline's take max_repeats)


def line_name(cell: CellResult, packages: list[str]) -> str:
    """'transformers==4.38.2': the versions the line holds fixed ('' in a one-package grid)."""
    return ", ".join(f"{p}=={cell.versions[p]}" for p in packages[1:])


def grid_lines(result: MatrixResult) -> dict[str, list[CellResult]]:
    """Measured cells per grid line, oldest candidate version first (one cell per version)."""
    cand = result.packages[0]
    lines: dict[str, dict[str, CellResult]] = {}
    for cell in result.cells:
        lines.setdefault(line_name(cell, result.packages), {}).setdefault(cell.versions[cand], cell)
    return {name: [by[v] for v in sorted(by, key=Version)] for name, by in lines.items()}


def find_steps(result: MatrixResult, criterion: Criterion) -> list[VersionStep]:
    """Neighbouring cells whose values cross the criterion (a metric with a threshold or max_increase)."""
    metric, cand = criterion.metric, result.packages[0]
    if not metric or (criterion.threshold is None and criterion.max_increase is None):
        return []
    steps = []
    for name, cells in grid_lines(result).items():
        for old, now in zip(cells, cells[1:]):
            if old.metrics.get(metric) is None or now.metrics.get(metric) is None:
                continue
            base = BaselineCell(versions=old.versions, status=old.status, metrics=old.metrics, exit_code=old.exit_code)
            judged = compare(now.model_copy(update={"baseline": None}), base, criterion, exit_mode=False)
            if judged.verdict is CellVerdict.REGRESSION:
                steps.append(VersionStep(line=name, metric=metric, package=cand, good=old.versions[cand],
                                         bad=now.versions[cand], good_key=old.key, bad_key=now.key,
                                         good_value=old.metrics[metric], bad_value=now.metrics[metric],
                                         threshold=judged.threshold, peaks=peaks_said(old.metrics, now.metrics, metric)))
    return steps


Measure = Callable[[list[Cell], range], list[list[Measurement]]]


def confirm_steps(steps: list[VersionStep], measure: Measure, cells: dict[str, Cell],
                  criterion: Criterion) -> list[VersionStep]:
    """Re-measure both cells of every step once more (``measure``: the cell runner's); confirmed when the
    new values still cross."""
    if not steps:
        return steps
    repeat = criterion.max_repeats + STEP_REPEAT_OFFSET
    keys = list(dict.fromkeys(k for s in steps for k in (s.good_key, s.bad_key)))
    again = dict(zip(keys, measure([cells[k] for k in keys], range(repeat, repeat + 1))))
    out = []
    for s in steps:
        good, bad = (metric_value(again[k], s.metric) for k in (s.good_key, s.bad_key))
        holds = good is not None and bad is not None and beyond(criterion, bad, good)[0]
        out.append(s.model_copy(update={"confirmed": holds, "confirm_values": [v for v in (good, bad) if v is not None]}))
    return out


def _same_step(a: VersionStep, b: VersionStep) -> bool:
    """The same line and metric, and version intervals (good, bad] that overlap: the same step, also after
    ``latest`` moved past it."""
    return (a.line, a.metric) == (b.line, b.metric) and \
        max(Version(a.good), Version(b.good)) < min(Version(a.bad), Version(b.bad))


def mark_new(steps: list[VersionStep], baseline: Optional[MatrixResult]) -> list[VersionStep]:
    """A step is new unless the baseline run had the same one (line, metric, an overlapping interval)."""
    known = [s for s in (baseline.version_steps if baseline else []) if s.confirmed]
    return [s.model_copy(update={"new": not any(_same_step(s, k) for k in known)}) for s in steps]
