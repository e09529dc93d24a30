"""A grid line's history: every stored night of the same grid (and this run), per cell key and metric,
read for level shifts rather than only against last night. From ``MIN_POINTS`` nights on with
E-Divisive means (:mod:`bisector.core.changepoints`); below that, percent against the previous night.

A change point is a regression when it goes the regression's way, beyond the criterion (its threshold
or ``max_increase`` from the level before) where the criterion has a rule; it is new when no earlier
run reported a change of that line within ``SAME_CHANGE`` nights of it, nor a confirmed regression of
that cell on that night. New E-Divisive regressions count for the exit code: the nights after the
change are their confirmation.
"""
from __future__ import annotations

import hashlib
import re

from bisector.core.changepoints import MIN_POINTS, ChangePoint, e_divisive, percent_steps
from bisector.core.criterion import Criterion, Direction
from bisector.matrix.compare import beyond
from bisector.matrix.grid_result import HistoryChange, HistoryLine, HistoryMethod, MatrixResult, Night

SAME_CHANGE = 2            # nights apart that two runs' change points of one line count as the same change
FALLBACK_RELATIVE = 0.10   # percent fallback without a relative rule: moves over 10% are reported
_PCT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*%\s*$")


def _nights(runs: list[MatrixResult], key: str, metric: str) -> list[Night]:
    out = []
    for run in runs:
        cell = next((c for c in run.cells if c.key == key), None)
        if cell is not None and cell.metrics.get(metric) is not None:
            out.append(Night(run_id=run.run_id, created=run.created, value=cell.metrics[metric], versions=cell.versions))
    return out


def _is_regression(criterion: Criterion, change: ChangePoint) -> bool:
    worse = change.after > change.before if criterion.direction is Direction.INCREASE else change.after < change.before
    if not worse:
        return False
    if criterion.threshold is not None or criterion.max_increase is not None:
        return beyond(criterion, change.after, change.before)[0]
    return True


def _fallback_relative(criterion: Criterion) -> float:
    found = _PCT.match(criterion.max_increase or "")
    return float(found[1]) / 100 if found else FALLBACK_RELATIVE


def _known(past: list[MatrixResult]) -> dict[tuple[str, str], set[str]]:
    """(key, metric) -> the runs (nights) earlier runs reported a change or a confirmed regression at."""
    known: dict[tuple[str, str], set[str]] = {}
    for run in past:
        for line in run.history_lines:
            known.setdefault((line.key, line.metric), set()).update(c.run_id for c in line.changes)
        for cell in run.confirmed:
            if run.criterion_metric:
                known.setdefault((cell.key, run.criterion_metric), set()).add(run.run_id)
    return known


def read_line(nights: list[Night], key: str, metric: str, criterion: Criterion,
              known_runs: set[str]) -> HistoryLine:
    """One line's change points (E-Divisive from ``MIN_POINTS`` nights, else percent); ``known_runs``:
    the nights earlier runs already reported for this line."""
    values = [n.value for n in nights]
    known = {i for i, n in enumerate(nights) if n.run_id in known_runs}
    if len(nights) >= MIN_POINTS:
        method = HistoryMethod.E_DIVISIVE
        seed = int(hashlib.sha256(f"{key}\0{metric}".encode()).hexdigest()[:8], 16)
        points = e_divisive(values, seed=seed)
    else:
        method, points = HistoryMethod.PERCENT, percent_steps(values, _fallback_relative(criterion))
    changes = []
    for p in points:
        night = nights[p.index]
        new = not any(abs(p.index - k) <= SAME_CHANGE for k in known)
        changes.append(HistoryChange(night=p.index + 1, run_id=night.run_id, created=night.created,
                                     versions=night.versions, before=p.before, after=p.after, relative=p.relative,
                                     p_value=p.p_value, regression=_is_regression(criterion, p), new=new))
    return HistoryLine(key=key, metric=metric, method=method, nights=nights, changes=changes)


def history_lines(past: list[MatrixResult], result: MatrixResult, criterion: Criterion) -> list[HistoryLine]:
    """Every cell key and metric of ``result`` over ``past`` (oldest first) and ``result`` itself."""
    runs = [*past, result]
    known = _known(past)
    lines = []
    for metric in result.metrics:
        for cell in result.cells:
            nights = _nights(runs, cell.key, metric)
            if nights:
                lines.append(read_line(nights, cell.key, metric, criterion, known.get((cell.key, metric), set())))
    return lines
