"""``bisector matrix``: measure a version grid, store the run, compare it with the previous one.

Every cell is one environment and one probe run, taken with the bisect's engine
(:class:`~bisector.measure.measurer.Measurer` through the run's executor: local threads with one GPU
per probe from a shared :class:`~bisector.measure.gpus.GpuPool`, or Ray tasks), so measurements land in the same store as bisects and a
cell measured before with the same fingerprints is reused, not rerun. Cells are matched with the
baseline run by grid position (slot labels such as ``latest``), so when ``latest`` moves from 1.2 to
1.6 the two are compared.
"""
from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional

from bisector.core.candidate import Candidate
from bisector.core.rule_text import describe_against_baseline
from bisector.core.measurement import Measurement, oom_cells
from bisector.core.units import declared, human_value
from bisector.data import specs_dir
from bisector.envs import TORCH, EnvSpec, load_env_spec
from bisector.envs import choose_torch
from bisector.errors import BisectorError, UndecidedError, UsageError
from bisector.matrix.cells import Cell, Plan, grid_id, plan_cells
from bisector.matrix.compare import compare, match_baseline, still_bad, summarise
from bisector.matrix.failure_line import failure_line, oom_line
from bisector.matrix.grid_config import MatrixConfig
from bisector.matrix.history import grid_history, load_baseline, save_run, timestamp
from bisector.store.run_record import claimed, new_run_id
from bisector.matrix.grid_result import CellResult, CellVerdict, MatrixResult
from bisector.matrix.report_cells import where
from bisector.matrix.steps import confirm_steps, find_steps, mark_new
from bisector.matrix.trend import history_lines
from bisector.measure.assembly import Engine, build_engine
from bisector.measure.gpus import Gpu
from bisector.measure.measurer import Measurer
from bisector.job.probe import Probe
from bisector.sources.index import Release, release_candidate
from bisector.store.storage import RunState, Store
from bisector.safety.safe_text import one_line


class CellRunner:
    """Measures cells in threads: a Measurer per cell environment spec, all sharing one GpuPool, and
    the next cells' environments prefetched while probes run."""

    def __init__(self, engine: Engine, spec: EnvSpec, probe: Probe, packages: list[str],
                 pins: dict[str, str], index_url: Optional[str], run_id: str, prefetch: bool = True):
        self.engine, self.store, self.spec, self.probe = engine, engine.store, spec, probe
        self.packages, self.pins, self.index_url, self.run_id = packages, pins, index_url, run_id
        self.jobs, self.prefetch = engine.jobs, prefetch
        self._measurers: dict[str, Measurer] = {}
        self._lock = threading.Lock()

    def spec_for(self, cell: Cell, candidate: Optional[str] = None) -> EnvSpec:
        """The env spec of a cell: every grid package but ``candidate`` pinned exactly, plus the pins
        (a torch version in the cell or the pins becomes the base)."""
        candidate = candidate or self.packages[0]
        laid = {**self.pins, **{p: f"=={s.version}" for p, s in zip(self.packages, cell.slots) if p != candidate}}
        return self.spec.over(laid, self.index_url, drop=tuple(self.packages))

    def candidate(self, cell: Cell) -> Candidate:
        """The cell's candidate: the first grid package at the cell's version, dated as the cell (its
        environment resolves as of the newest pinned release)."""
        slot = cell.slots[0]
        return release_candidate(self.packages[0],
                                 Release(version=slot.version, uploaded=cell.as_of or slot.uploaded))

    @property
    def probes_run(self) -> int:
        """Probes run so far, in every cell."""
        return sum(m.probes_run for m in self._measurers.values())

    @property
    def reused(self) -> set[str]:
        """Keys of the measurements taken from the store instead of run."""
        return {key for m in self._measurers.values() for key in m.reused_keys}

    def measure(self, cells: list[Cell], repeats: range,
                on_done: Optional[Callable[[Cell, list[Measurement]], None]] = None) -> list[list[Measurement]]:
        """Measure ``repeats`` of every cell (in parallel); results in cell order."""
        def task(i: int) -> list[Measurement]:
            self._prefetch_after(cells, i)
            measurer, cand = self._measurer(self.spec_for(cells[i])), self.candidate(cells[i])
            ms = [measurer.measure(cand, r) for r in repeats]
            if on_done:
                on_done(cells[i], ms)
            return ms
        with ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="bisector-matrix") as pool:
            return list(pool.map(task, range(len(cells))))

    def _measurer(self, spec: EnvSpec) -> Measurer:
        key = spec.model_dump_json()
        with self._lock:
            if key not in self._measurers:
                self._measurers[key] = self.engine.measurer(spec, self.probe, self.index_url, self.run_id)
            return self._measurers[key]

    def _prefetch_after(self, cells: list[Cell], i: int) -> None:
        """Queue the environments of the cells that start after the ones running now."""
        upcoming = cells[i + self.jobs: i + self.jobs + 2] if self.prefetch else []
        if not upcoming:
            return
        spec = self.spec_for(upcoming[0])
        try:
            measurer = self._measurer(spec)
            todo = [self.candidate(c) for c in upcoming if self.spec_for(c) == spec]
            measurer.prefetch([c for c in todo if measurer.stored(c, 0) is None])
        except BisectorError:
            pass  # the cell's own measurement reports the problem


class _Progress:
    """One stderr line per measured cell (stdout stays clean for --json)."""

    def __init__(self, runner: CellRunner, metric: Optional[str]):
        self.runner, self.metric = runner, metric

    def __call__(self, cell: Cell, ms: list[Measurement]) -> None:
        m = ms[-1]
        value = m.metrics.get(self.metric) if self.metric else None
        shown = f" {self.metric}={human_value(value, self.metric)}" if value is not None else ""
        why = failure_line(m) if not m.status.measured else oom_line(oom_cells(m)) if oom_cells(m) else ""
        stored = " (stored)" if all(x.reused for x in ms) else ""
        print(one_line(f"  cell {where(cell.versions(self.runner.packages))}: {m.status}{shown}{stored}"
                       + (f": {why}" if why else "")), file=sys.stderr, flush=True)


def _metrics(config: MatrixConfig, cells: list[CellResult]) -> list[str]:
    """Columns and plots: ``[matrix] metrics``, else the criterion's metric, else every metric seen."""
    if config.matrix.metrics:
        return list(config.matrix.metrics)
    if config.criterion.metric:
        return [config.criterion.metric]
    return sorted({k for c in cells for k in c.metrics})


def _measure(config: MatrixConfig, runner: CellRunner, cells: list[Cell]) -> list[CellResult]:
    """Measure each distinct version combination once; cells sharing versions share the result."""
    unique: dict[tuple, Cell] = {}
    for cell in cells:
        unique.setdefault(tuple(s.version for s in cell.slots), cell)
    crit = config.criterion
    ms = runner.measure(list(unique.values()), range(crit.repeats), on_done=_Progress(runner, crit.metric))
    by_versions = dict(zip(unique, ms))
    out = []
    for c in cells:
        ms = by_versions[tuple(s.version for s in c.slots)]
        out.append(summarise(c, runner.packages, ms, crit).model_copy(update={"reused": all(m.reused for m in ms)}))
    return out


def _confirm(config: MatrixConfig, runner: CellRunner, cells: list[Cell],
             results: list[CellResult]) -> list[CellResult]:
    """Re-measure each regressed cell once more (a new repeat index); confirmed when it still crosses."""
    todo = [i for i, r in enumerate(results) if r.verdict is CellVerdict.REGRESSION]
    if not todo:
        return results
    crit, exit_mode = config.criterion, config.probe.judged_by_exit_code
    again = runner.measure([cells[i] for i in todo], range(crit.max_repeats, crit.max_repeats + 1))
    out = list(results)
    for i, ms in zip(todo, again):
        bad, value = still_bad(results[i], ms, crit, exit_mode)
        out[i] = results[i].model_copy(update={"confirmed": bad, "confirm_value": value,
                                               "measurements": results[i].measurements + [m.key for m in ms]})
    return out


def _start(config: MatrixConfig, store: Store, plan: Plan, baseline: Optional[MatrixResult],
           run_id: Optional[str]) -> MatrixResult:
    m, gid = config.matrix, grid_id(config)
    return MatrixResult(run_id=run_id or new_run_id(), created=timestamp(), grid_id=gid, packages=m.packages, grid=m.grid,
                        pins=m.pins, excluded=plan.excluded, invalid=plan.invalid, notes=list(plan.notes),
                        probe=config.probe.short_label(),
                        criterion=describe_against_baseline(config.criterion), criterion_metric=config.criterion.metric,
                        baseline_run=baseline.run_id if baseline else None,
                        baseline_created=baseline.created if baseline else None,
                        history=len(grid_history(store, gid)))


def matrix_plan(config: MatrixConfig, cache_dir: Path) -> Plan:
    """The run's cells; the invalid combinations are said (stderr) before anything is built; an index
    that cannot be read is nothing measured."""
    try:
        plan = plan_cells(config, cache_dir)
    except UsageError:
        raise
    except BisectorError as exc:
        raise UndecidedError(f"nothing could be measured: {exc}") from None
    for bad in plan.invalid:
        print(one_line(f"  not a valid combination: {where(bad.versions)}: {bad.reason}"), file=sys.stderr, flush=True)
    return plan


def run_matrix(config: MatrixConfig, store: Store, cache_dir: Path, baseline_id: Optional[str],
               command: list[str], plan: Optional[Plan] = None, run_id: Optional[str] = None,
               gpus: Optional[list[Gpu]] = None) -> tuple[MatrixResult, CellRunner, list[Cell]]:
    """Plan (unless the preflight's ``plan`` is given), measure, compare and confirm one matrix run; the
    run is stored as it starts and ends (``run_id``: a stopped run of the same grid, continued; ``gpus``:
    this machine's, as the preflight found them)."""
    spec = load_env_spec(config.matrix.env, specs_dir())
    if TORCH not in {*config.matrix.packages, *config.matrix.pins}:   # else each cell's torch is its base
        spec = choose_torch(spec, None, config.matrix.packages[0], config.matrix.index_url)
    baseline = load_baseline(store, grid_id(config), baseline_id)
    plan = plan or matrix_plan(config, cache_dir)
    cells = plan.cells
    result = _start(config, store, plan, baseline, claimed(store, run_id))   # (taken up by another: a run of its own)
    prefetch = config.run.prefetch if config.run.prefetch is not None else True
    engine = build_engine(config.run, store, gpus=gpus)
    runner = CellRunner(engine, spec, config.probe, config.matrix.packages, config.matrix.pins,
                        config.matrix.index_url, result.run_id, prefetch)
    save_run(store, config, result, RunState.RUNNING, command)
    try:
        measured = _measure(config, runner, cells)
        bases = match_baseline(measured, baseline)
        compared = [compare(c, bases.get(c.key), config.criterion, config.probe.judged_by_exit_code) for c in measured]
        compared = _confirm(config, runner, cells, compared)
    except BaseException as exc:
        save_run(store, config, result, RunState.FAILED if isinstance(exc, Exception) else RunState.INTERRUPTED,
                 command)
        raise
    result = result.model_copy(update={"cells": compared, "metrics": _metrics(config, compared),
                                       "units": declared({k for c in compared for k in c.metrics})})
    try:
        result = _steps_and_history(config, store, runner, cells, result, baseline)
    except BaseException as exc:
        save_run(store, config, result, RunState.FAILED if isinstance(exc, Exception) else RunState.INTERRUPTED,
                 command)
        raise
    result = result.model_copy(update={"probes_run": runner.probes_run, "measurements_reused": len(runner.reused)})
    return result, runner, cells


def _steps_and_history(config: MatrixConfig, store: Store, runner: CellRunner, cells: list[Cell],
                       result: MatrixResult, baseline: Optional[MatrixResult]) -> MatrixResult:
    """Steps along the candidate's versions in this run (re-measured), and the history's change points."""
    by_key = {c.key: c for c in cells}
    steps = confirm_steps(find_steps(result, config.criterion), runner.measure, by_key, config.criterion)
    past = [MatrixResult.model_validate(r.result) for r in grid_history(store, result.grid_id)]
    return result.model_copy(update={"version_steps": mark_new(steps, baseline),
                                     "history_lines": history_lines(past, result, config.criterion)})
