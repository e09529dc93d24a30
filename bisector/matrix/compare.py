"""A matrix cell against its baseline: its summary over repeats, its verdict, its confirmation.

The baseline cell plays the good endpoint: the same criterion (threshold or ``max_increase`` from
the baseline's value, the noise band, failure classes, the exit-code contract) decides.
"""
from __future__ import annotations

from typing import Optional

from bisector.core.criterion import Criterion, calibrate
from bisector.core.failure_rule import exit_code_verdict, failure_verdict
from bisector.core.measurement import Measurement, Status, medians, metric_value, oom_cells
from bisector.core.verdict import Verdict
from bisector.matrix.cells import Cell
from bisector.matrix.failure_line import failure_line, missing_metric_line, oom_line
from bisector.matrix.grid_result import BaselineCell, CellResult, CellVerdict, MatrixResult
from bisector.matrix.peaks_said import peaks_said


def _reason(ms: list[Measurement], ok: list[Measurement], oom: list[str], metrics: dict, criterion: Criterion):
    if not ok:
        return failure_line(ms[-1])
    if oom:
        return oom_line(oom)
    if criterion.metric and criterion.metric not in metrics:
        return missing_metric_line(ok[-1], criterion.metric)
    return None


def summarise(cell: Cell, packages: list[str], ms: list[Measurement], criterion: Criterion) -> CellResult:
    """A cell's metrics (median over repeats), status, one-line reason when it was not measured whole
    (a partial OOM lists the probe cells that ran out) and whether its failure counts as BAD."""
    ok = [m for m in ms if m.status is Status.OK]
    failed = next((m for m in reversed(ms) if not m.status.measured), None)
    oom = sorted({c for m in ok for c in oom_cells(m)})
    bad = (not ok and failed is not None and failure_verdict(failed, criterion)[0] is Verdict.BAD) or (
        bool(oom) and criterion.oom_is_bad)
    last = ok[-1] if ok else ms[-1]
    metrics = dict(sorted(medians(ms).items()))
    return CellResult(key=cell.key, labels=[s.label for s in cell.slots], versions=cell.versions(packages),
                      status=last.status, metrics=metrics, reason=_reason(ms, ok, oom, metrics, criterion),
                      exit_code=last.exit_code, bad_failure=bad, oom=oom, measurements=[m.key for m in ms])


def _exit_bad(exit_code: Optional[int]) -> bool:
    return exit_code_verdict(exit_code)[0] is Verdict.BAD


def beyond(criterion: Criterion, value: float, good: float) -> tuple[bool, float]:
    """(clearly beyond the criterion, threshold) for ``value`` with ``good`` as the good value."""
    cal = calibrate(criterion, good=good)
    return cal.clearly_bad(value), cal.threshold


def compare(cur: CellResult, base: Optional[BaselineCell], criterion: Criterion, exit_mode: bool) -> CellResult:
    """Set the cell's verdict against its baseline cell (the criterion metric decides)."""
    update: dict = {"baseline": base}
    if base is None:
        update["verdict"] = CellVerdict.NEW if cur.status.measured else CellVerdict.LOST
    elif exit_mode:
        regressed = _exit_bad(cur.exit_code) and not _exit_bad(base.exit_code)
        update["verdict"] = CellVerdict.REGRESSION if regressed else (
            CellVerdict.SAME if base.exit_code == cur.exit_code else CellVerdict.MOVED)
    elif not cur.status.measured:
        update["verdict"] = _unmeasured(cur, base)
    elif cur.oom and cur.bad_failure and base.status.measured and not base.oom:
        update["verdict"] = CellVerdict.REGRESSION   # a partial OOM: running out is the regression
    elif not criterion.metric:
        update["verdict"] = CellVerdict.SAME if cur.metrics == base.metrics else CellVerdict.MOVED
    else:
        update.update(_metric_verdict(cur, base, criterion))
    return cur.model_copy(update=update)


def _unmeasured(cur: CellResult, base: BaselineCell) -> CellVerdict:
    """Not measured tonight: the regression when its failure counts as BAD, lost when the baseline
    measured it, failed (a known failure) when the baseline did not either."""
    if base.status.measured:
        return CellVerdict.REGRESSION if cur.bad_failure else CellVerdict.LOST
    return CellVerdict.FAILED


def _metric_verdict(cur: CellResult, base: BaselineCell, criterion: Criterion) -> dict:
    metric = criterion.metric
    value, good = cur.metrics.get(metric), base.metrics.get(metric)
    if value is None:
        return {"verdict": CellVerdict.LOST if good is not None else CellVerdict.FAILED}
    if good is None:
        return {"verdict": CellVerdict.NEW}
    crossed, threshold = beyond(criterion, value, good)
    was_bad = calibrate(criterion, good=good).is_bad_value(good)
    verdict = CellVerdict.REGRESSION if crossed and not was_bad else (
        CellVerdict.SAME if value == good else CellVerdict.MOVED)
    peaks = peaks_said(base.metrics, cur.metrics, metric) if value != good else None
    return {"verdict": verdict, "threshold": threshold, "peaks": peaks}


def still_bad(cell: CellResult, ms: list[Measurement], criterion: Criterion,
              exit_mode: bool) -> tuple[bool, Optional[float]]:
    """Whether a re-measurement of a regressed cell still crosses the criterion (and its value)."""
    last = ms[-1]
    if exit_mode:
        return _exit_bad(last.exit_code), None
    if not cell.status.measured or cell.oom:
        failed_bad = not last.status.measured and failure_verdict(last, criterion)[0] is Verdict.BAD
        return failed_bad or bool(oom_cells(last) and criterion.oom_is_bad), metric_value(ms, criterion.metric)
    value = metric_value(ms, criterion.metric)
    if value is None:
        return False, None
    return beyond(criterion, value, cell.baseline.metrics[criterion.metric])[0], value


def match_baseline(cells: list[CellResult], base: Optional[MatrixResult]) -> dict[str, BaselineCell]:
    """Baseline cells by grid position; a position the baseline lacks falls back to equal versions."""
    if base is None:
        return {}
    by_key = {c.key: c for c in base.cells}
    by_versions = {tuple(c.versions.items()): c for c in base.cells}
    out = {}
    for cell in cells:
        found = by_key.get(cell.key) or by_versions.get(tuple(cell.versions.items()))
        if found is not None:
            out[cell.key] = BaselineCell(versions=found.versions, status=found.status, metrics=found.metrics,
                                         exit_code=found.exit_code, oom=found.oom)
    return out
