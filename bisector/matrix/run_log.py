"""``bisector log`` of a stored matrix run: one line per cell (its verdict, versions, the criterion's
value, the probe's seconds, why it was not measured), the invalid combinations, and the headline."""
from __future__ import annotations

from bisector.core.units import human_value
from bisector.matrix.grid_report import headline
from bisector.matrix.grid_result import MatrixResult
from bisector.matrix.report_cells import counts, where
from bisector.job.commandline import joined
from bisector.store.storage import RunRow, Store


def _grid(config: dict) -> str:
    grid = (config.get("matrix") or {}).get("grid") or {}
    return "; ".join(f"{p} = {', '.join([e] if isinstance(e, str) else e)}" for p, e in grid.items()) or "-"


def matrix_log(store: Store, run: RunRow) -> str:
    """The log of a matrix run (a run still going, or one that failed, has only its header)."""
    lines = [f"# bisector matrix {run.id}: {_grid(run.config)}", f"# command: {joined(run.command)}",
             f"# status: {run.status}"]
    if not run.result:
        return "\n".join(lines)
    result = MatrixResult.model_validate(run.result)
    metric = result.criterion_metric
    for cell in result.cells:
        taken = [m for m in (store.get_measurement(k) for k in cell.measurements) if m is not None]
        value = cell.metrics.get(metric) if metric else None
        shown = f" {metric}={human_value(value, metric)}" if value is not None else ""
        repeats = f" measurements={len(taken)}" if len(taken) != 1 else ""
        stored = " (stored)" if cell.reused else ""
        reason = f" # {cell.reason}" if cell.reason else ""
        lines.append(f"{cell.verdict} {where(cell.versions)}{shown}{repeats} "
                     f"({sum(m.seconds for m in taken):.1f}s){stored}{reason}")
    lines += [f"invalid {where(c.versions)} # {c.reason}" for c in result.invalid]
    lines.append(f"# {headline(result)} ({counts(result)})")
    return "\n".join(lines)
