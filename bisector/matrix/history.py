"""Matrix runs in the store: each run's row, the history of a grid, the baseline a run is compared with."""
from __future__ import annotations

import datetime as dt
from typing import Optional

from bisector.errors import UsageError
from bisector.matrix.grid_config import MatrixConfig
from bisector.matrix.grid_result import MatrixResult
from bisector.store.run_record import RunRecord, config_hash
from bisector.store.storage import RunKind, RunRow, RunState, Store


def timestamp() -> str:
    """Now, UTC, to the microsecond (matrix runs of one grid are ordered by it)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")


def grid_history(store: Store, gid: str) -> list[RunRow]:
    """Finished matrix runs of this grid, oldest first."""
    runs = [r for r in store.list_runs() if r.kind is RunKind.MATRIX and r.status == RunState.DONE and r.result
            and r.result.get("grid_id") == gid]
    return sorted(runs, key=lambda r: r.result.get("created", r.created))


def load_baseline(store: Store, gid: str, run_id: Optional[str]) -> Optional[MatrixResult]:
    """The named baseline run, or the previous finished run of the same grid (None on a first run)."""
    if run_id is None:
        runs = grid_history(store, gid)
        return MatrixResult.model_validate(runs[-1].result) if runs else None
    run = store.get_run(run_id)
    if run is None or run.kind is not RunKind.MATRIX or not run.result:
        raise UsageError(f"--baseline {run_id}: no finished matrix run with that id in {store.path}")
    return MatrixResult.model_validate(run.result)


def save_run(store: Store, config: MatrixConfig, result: MatrixResult, status: RunState, command: list[str]) -> None:
    """Store the run row (kind="matrix"); the result carries per-cell metrics and measurement keys."""
    RunRecord(store, RunKind.MATRIX, command, config.model_dump(mode="json"), config_hash(config), result.run_id,
              result.created).save(status, result.model_dump(mode="json") if status is RunState.DONE else None,
                                   updated=timestamp())
