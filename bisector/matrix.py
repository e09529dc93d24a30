"""``bisector matrix``: measure a version grid, store the run, compare it with the previous one.

Every cell is one environment and one probe run, taken through :class:`~bisector.measure.Measurer`,
so measurements land in the same store as bisects and a cell measured before with the same
fingerprints is reused, not rerun. Cells are matched with the baseline run by grid position
(slot labels such as ``latest``), so when ``latest`` moves from 1.2 to 1.6 the two are compared.
"""
from __future__ import annotations

import datetime as dt
import queue
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional

from packaging.utils import canonicalize_name
from pydantic import BaseModel

from .candidate import Candidate, CandidateKind
from .criterion import Criterion, calibrate, exit_code_verdict, failure_verdict, metric_value
from .envs import EnvManager, EnvSpec
from .envs.base import ROOT as TORCH
from .errors import BisectorError, EnvironmentFailure, UsageError
from .index import list_releases
from .installer_config import resolve_index_url
from .matrix_config import Cell, MatrixConfig, build_cells, expand_axis

from .measure import Measurer, install_target
from .probe import ProbeSpec
from .store import Measurement, RunRow, Store
from .verdict import Verdict

MATRIX_SCHEMA = "bisector.matrix/1"
MEASURED = {"ok", "exit-code"}


class BaselineCell(BaseModel):
    """What the baseline run measured at a cell's grid position."""

    versions: dict[str, str]
    status: str
    metrics: dict[str, float] = {}
    exit_code: Optional[int] = None


class CellResult(BaseModel):
    """One measured cell and its comparison with the baseline.

    ``verdict``: new (no baseline), same, moved (value changed, criterion not crossed),
    regression (crossed; ``confirmed`` says whether a re-measurement still crossed) or failed.
    """

    key: str
    labels: list[str]
    versions: dict[str, str]
    status: str
    metrics: dict[str, float] = {}
    reason: Optional[str] = None
    exit_code: Optional[int] = None
    bad_failure: bool = False
    measurements: list[str] = []
    reused: bool = False
    baseline: Optional[BaselineCell] = None
    verdict: str = "new"
    threshold: Optional[float] = None
    confirmed: Optional[bool] = None
    confirm_value: Optional[float] = None

    @property
    def moved_packages(self) -> list[str]:
        """Packages whose version differs from the baseline cell's."""
        if self.baseline is None:
            return []
        return [p for p, v in self.versions.items() if self.baseline.versions.get(p) not in (None, v)]


class BisectAttachment(BaseModel):
    """A bisect started for a regression, with its markdown report."""

    package: str
    good: str
    bad: str
    status: str
    run_id: Optional[str] = None
    first_bad: Optional[str] = None
    last_good: Optional[str] = None
    report_file: Optional[str] = None
    markdown: str = ""
    result: Optional[dict] = None


class MatrixResult(BaseModel):
    """A whole matrix run (stored as the ``result`` of a ``kind="matrix"`` run row)."""

    format: str = MATRIX_SCHEMA
    run_id: str
    created: str
    grid_id: str
    packages: list[str]
    grid: dict[str, list[str]]
    pins: dict[str, str] = {}
    excluded: int = 0
    probe: str
    criterion: str
    criterion_metric: Optional[str] = None
    metrics: list[str] = []
    baseline_run: Optional[str] = None
    baseline_created: Optional[str] = None
    history: int = 0
    cells: list[CellResult] = []
    probes_run: int = 0
    measurements_reused: int = 0
    bisects: list[BisectAttachment] = []
    notes: list[str] = []

    @property
    def regressions(self) -> list[CellResult]:
        return [c for c in self.cells if c.verdict == "regression"]

    @property
    def confirmed(self) -> list[CellResult]:
        return [c for c in self.regressions if c.confirmed]

    @property
    def exit_code(self) -> int:
        """0 no regression, 1 confirmed regression, 3 nothing could be measured."""
        if not any(c.status in MEASURED for c in self.cells):
            return 3
        return 1 if self.confirmed else 0


def timestamp() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")


# -- measuring --------------------------------------------------------------------------------

class CellRunner:
    """Measures cells in threads: one probe per GPU (CUDA_VISIBLE_DEVICES per run) and the next
    cells' environments prefetched while probes run."""

    def __init__(self, store_path: Path, envs: EnvManager, spec: EnvSpec, probe: ProbeSpec, packages: list[str],
                 pins: dict[str, str], index_url: Optional[str], run_id: str, jobs: int = 1,
                 prefetch: bool = True, gpus: Optional[list[str]] = None):
        self.store_path, self.envs, self.spec, self.probe = store_path, envs, spec, probe
        self.packages, self.pins, self.index_url, self.run_id = packages, pins, index_url, run_id
        self.jobs, self.prefetch, self.gpus = max(1, jobs), prefetch, list(gpus or [])
        self._tokens: queue.Queue = queue.Queue()
        for gpu in self.gpus or [None] * self.jobs:
            self._tokens.put(gpu)
        self._local = threading.local()
        self._stores: list[Store] = []
        self._lock = threading.Lock()
        self.probes_run = 0
        self.reused: set[str] = set()

    def spec_for(self, cell: Cell, candidate: Optional[str] = None) -> EnvSpec:
        """The env spec of a cell: every grid package but ``candidate`` pinned exactly, plus the pins.

        torch is never a companion: a torch version in the cell (or the pins) becomes the base."""
        candidate = candidate or self.packages[0]
        named = set(self.packages) | set(self.pins)
        companions = {k: v for k, v in self.spec.companions.items() if canonicalize_name(k) not in named}
        companions.update(self.pins)
        companions.update({p: f"=={s.version}" for p, s in zip(self.packages, cell.slots) if p != candidate})
        update: dict = {"companions": companions}
        torch_pin = companions.pop(TORCH, None)
        if torch_pin is not None:
            update.update(base=f"torch=={torch_pin.strip().lstrip('=').strip()}",
                          index_url=self.spec.index_url or self.index_url)
        return self.spec.model_copy(update=update)

    def candidate(self, cell: Cell) -> Candidate:
        slot = cell.slots[0]
        return Candidate(package=self.packages[0], kind=CandidateKind.RELEASE, ref=slot.version, date=slot.uploaded)

    def _store(self) -> Store:
        if not hasattr(self._local, "store"):
            self._local.store = Store(self.store_path)
            with self._lock:
                self._stores.append(self._local.store)
        return self._local.store

    def _measurer(self, spec: EnvSpec) -> Measurer:
        return Measurer(self._store(), self.envs, spec, self.probe, index_url=self.index_url, run_id=self.run_id)

    def measure(self, cells: list[Cell], repeats: range,
                on_done: Optional[Callable[[Cell, list[Measurement]], None]] = None) -> list[list[Measurement]]:
        """Measure ``repeats`` of every cell (in parallel); results in cell order."""
        def task(i: int) -> list[Measurement]:
            self._prefetch_after(cells, i)
            ms = self._measure_one(cells[i], repeats)
            if on_done:
                on_done(cells[i], ms)
            return ms
        with ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="bisector-matrix") as pool:
            return list(pool.map(task, range(len(cells))))

    def _measure_one(self, cell: Cell, repeats: range) -> list[Measurement]:
        spec, cand = self.spec_for(cell), self.candidate(cell)
        if self.gpus and self._measurer(spec).stored(cand, repeats[0]) is None:
            try:  # build before taking a GPU, so building never holds one
                self.envs.ensure(spec, install_target(cand, None, self.index_url))
            except EnvironmentFailure:
                pass  # the measurer records the failure
        gpu = self._tokens.get()
        try:
            run_spec = spec if gpu is None else spec.model_copy(
                update={"env_vars": {**spec.env_vars, "CUDA_VISIBLE_DEVICES": gpu}})
            measurer = self._measurer(run_spec)
            ms = [measurer.measure(cand, r) for r in repeats]
        finally:
            self._tokens.put(gpu)
        with self._lock:
            self.probes_run += measurer.probes_run
            self.reused |= measurer.reused_keys
        return ms

    def _prefetch_after(self, cells: list[Cell], i: int) -> None:
        """Queue the environments of the cells that start after the ones running now."""
        if not self.prefetch:
            return
        upcoming = cells[i + self.jobs: i + self.jobs + 2]
        if not upcoming:
            return
        spec = self.spec_for(upcoming[0])
        try:
            todo = [self.candidate(c) for c in upcoming if self.spec_for(c) == spec]
            todo = [c for c in todo if self._measurer(spec).stored(c, 0) is None]
            if todo:
                self.envs.prefetch(spec, [install_target(c, None, self.index_url) for c in todo])
        except BisectorError:
            pass  # the cell's own measurement reports the problem

    def close(self) -> None:
        for store in self._stores:
            store.close()


# -- summarising and comparing ------------------------------------------------------------------

def summarise(cell: Cell, packages: list[str], ms: list[Measurement], criterion: Criterion) -> CellResult:
    """A cell's metrics (median over repeats), status and whether its failure counts as BAD."""
    ok = [m for m in ms if m.status == "ok"]
    names = sorted({k for m in ok for k in m.metrics})
    failed = next((m for m in reversed(ms) if m.status not in MEASURED), None)
    bad = not ok and failed is not None and failure_verdict(failed, criterion)[0] is Verdict.BAD
    last = ok[-1] if ok else ms[-1]
    return CellResult(key=cell.key, labels=[s.label for s in cell.slots], versions=cell.versions(packages),
                      status=last.status, metrics={n: metric_value(ms, n) for n in names},
                      reason=None if ok else last.reason, exit_code=last.exit_code, bad_failure=bad,
                      measurements=[m.key for m in ms])


def _exit_bad(status: str, exit_code: Optional[int]) -> bool:
    """git-bisect-run contract for exit-code probes: 1-127 but 125 is BAD."""
    fake = Measurement(key="", package="", candidate="", env_fingerprint="", probe_fingerprint="",
                       status=status, exit_code=exit_code, seconds=0)
    return exit_code_verdict(fake)[0] is Verdict.BAD


def judge_value(criterion: Criterion, value: float, good: float) -> tuple[bool, float]:
    """(beyond the criterion, threshold) for ``value`` with ``good`` as the good value."""
    cal = calibrate(criterion, good=good)
    beyond = cal.is_bad_value(value) and abs(value - cal.threshold) > criterion.noise
    return beyond, cal.threshold


def compare(cur: CellResult, base: Optional[BaselineCell], criterion: Criterion, exit_mode: bool) -> CellResult:
    """Set the cell's verdict against its baseline cell (the criterion metric decides)."""
    update: dict = {"baseline": base}
    if base is None:
        update["verdict"] = "new"
    elif exit_mode:
        bad, base_bad = _exit_bad(cur.status, cur.exit_code), _exit_bad(base.status, base.exit_code)
        update["verdict"] = "regression" if bad and not base_bad else (
            "same" if base.exit_code == cur.exit_code else "moved")
    elif cur.status not in MEASURED:
        update["verdict"] = "regression" if cur.bad_failure and base.status in MEASURED else "failed"
    elif not criterion.metric:
        update["verdict"] = "same" if cur.metrics == base.metrics else "moved"
    else:
        update.update(_metric_verdict(cur, base, criterion))
    return cur.model_copy(update=update)


def _metric_verdict(cur: CellResult, base: BaselineCell, criterion: Criterion) -> dict:
    metric = criterion.metric
    value, good = cur.metrics.get(metric), base.metrics.get(metric)
    if value is None:
        return {"verdict": "failed", "reason": cur.reason or f"metric {metric} missing"}
    if good is None:
        return {"verdict": "new"}
    beyond, threshold = judge_value(criterion, value, good)
    was_bad = calibrate(criterion, good=good).is_bad_value(good)
    verdict = "regression" if beyond and not was_bad else ("same" if value == good else "moved")
    return {"verdict": verdict, "threshold": threshold}


def still_bad(cell: CellResult, ms: list[Measurement], criterion: Criterion,
              exit_mode: bool) -> tuple[bool, Optional[float]]:
    """Whether a re-measurement of a regressed cell still crosses the criterion (and its value)."""
    last = ms[-1]
    if exit_mode:
        return _exit_bad(last.status, last.exit_code), None
    if cell.status not in MEASURED:
        return last.status not in MEASURED and failure_verdict(last, criterion)[0] is Verdict.BAD, None
    value = metric_value(ms, criterion.metric)
    if value is None:
        return False, None
    return judge_value(criterion, value, cell.baseline.metrics[criterion.metric])[0], value


def match_baseline(cells: list[CellResult], base: Optional["MatrixResult"]) -> dict[str, BaselineCell]:
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
                                         exit_code=found.exit_code)
    return out


# -- history ------------------------------------------------------------------------------------

def grid_history(store: Store, gid: str, exclude: Optional[str] = None) -> list[RunRow]:
    """Finished matrix runs of this grid, oldest first."""
    runs = [r for r in store.list_runs() if r.kind == "matrix" and r.status == "done" and r.result
            and r.result.get("grid_id") == gid and r.id != exclude]
    return sorted(runs, key=lambda r: r.result.get("created", r.created))


def load_baseline(store: Store, gid: str, run_id: Optional[str]) -> Optional[MatrixResult]:
    """The named baseline run, or the previous finished run of the same grid (None on a first run)."""
    if run_id is None:
        runs = grid_history(store, gid)
        return MatrixResult.model_validate(runs[-1].result) if runs else None
    run = store.get_run(run_id)
    if run is None or run.kind != "matrix" or not run.result:
        raise UsageError(f"--baseline {run_id}: no finished matrix run with that id in {store.path}")
    return MatrixResult.model_validate(run.result)


def save_run(store: Store, config: MatrixConfig, result: MatrixResult, status: str, command: list[str]) -> None:
    """Store the run row (kind="matrix"); the result carries per-cell metrics and measurement keys."""
    store.put_run(RunRow(id=result.run_id, created=result.created, updated=timestamp(), kind="matrix",
                         command=command, config=config.model_dump(mode="json"), status=status,
                         result=result.model_dump(mode="json") if status == "done" else None))


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def resolve_axes(config: MatrixConfig, index_url: str) -> dict:
    """Every grid package's slots, resolved against the index now (``latest`` moves over time)."""
    m = config.matrix
    return {p: expand_axis(p, m.grid[p], list_releases(index_url, p), pre=m.pre) for p in m.packages}


def plan_cells(config: MatrixConfig) -> tuple[list[Cell], int]:
    """The cells to measure; a usage error when exclusions leave none."""
    url = resolve_index_url(config.matrix.index_url)
    cells, dropped = build_cells(config.matrix, resolve_axes(config, url))
    if not cells:
        raise UsageError(f"the matrix has no cells left after {dropped} exclusions")
    return cells, dropped
