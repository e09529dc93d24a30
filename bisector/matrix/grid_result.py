"""A matrix run's results: each cell against its baseline, bisects attached, the whole run."""
from __future__ import annotations

import enum
from typing import Optional

from pydantic import BaseModel

from bisector.core.measurement import Status

MATRIX_SCHEMA = "bisector.matrix/1"
CELLS_LOST = 4   # the exit code of a run that lost cells (and found no confirmed regression)


class CellVerdict(enum.StrEnum):
    """A cell against its baseline cell."""

    NEW = "new"                # no baseline cell
    SAME = "same"
    MOVED = "moved"            # the value changed without crossing the criterion
    REGRESSION = "regression"  # crossed the criterion (``confirmed`` says whether it held on re-measurement)
    LOST = "lost"              # not measured, where the baseline measured it (or a cell no run measured yet)
    FAILED = "failed"          # not measured, and the baseline could not measure it either (a known failure)


class InvalidCell(BaseModel):
    """A grid cell that the packages' own metadata declare incompatible: never built, never measured."""

    key: str
    versions: dict[str, str]
    reason: str


class BaselineCell(BaseModel):
    """What the baseline run measured at a cell's grid position."""

    versions: dict[str, str]
    status: Status
    metrics: dict[str, float] = {}
    exit_code: Optional[int] = None
    oom: list[str] = []


class CellResult(BaseModel):
    """One measured cell and its comparison with the baseline.

    ``verdict``: new (no baseline), same, moved (value changed, criterion not crossed), regression
    (crossed, or ran out of memory where the baseline did not; ``confirmed`` says whether a
    re-measurement still did), lost (not measured, where the baseline was, or where no run measured it
    yet) or failed (not measured, nor at the baseline). ``reason``: one line saying why it was not
    measured whole; ``oom``: the probe cells that ran out of memory while others were measured.
    """

    key: str
    labels: list[str]
    versions: dict[str, str]
    status: Status
    metrics: dict[str, float] = {}
    reason: Optional[str] = None
    exit_code: Optional[int] = None
    bad_failure: bool = False
    oom: list[str] = []
    measurements: list[str] = []
    reused: bool = False
    baseline: Optional[BaselineCell] = None
    verdict: CellVerdict = CellVerdict.NEW
    threshold: Optional[float] = None
    confirmed: Optional[bool] = None
    confirm_value: Optional[float] = None
    peaks: Optional[str] = None          # what the peaks behind a derived metric did (bisector.matrix.peaks_said)

    @property
    def moved_packages(self) -> list[str]:
        """Packages whose version differs from the baseline cell's."""
        if self.baseline is None:
            return []
        return [p for p, v in self.versions.items() if self.baseline.versions.get(p) not in (None, v)]


class HistoryMethod(enum.StrEnum):
    """How a grid line's history was read: E-Divisive means, or (short histories) percent against the
    previous night."""

    E_DIVISIVE = "e-divisive"
    PERCENT = "percent"


class Night(BaseModel):
    """One stored run's value of a grid line's metric."""

    run_id: str
    created: str
    value: float
    versions: dict[str, str]


class HistoryChange(BaseModel):
    """A level shift in a grid line's history: the night it starts (1 = the oldest stored night), that
    night's run and versions, the level before and after, the permutation p-value (E-Divisive only);
    ``regression`` when it goes the regression's way beyond the criterion, ``new`` when no earlier run
    reported it (then it counts for the exit code)."""

    night: int
    run_id: str
    created: str
    versions: dict[str, str]
    before: float
    after: float
    relative: float
    p_value: Optional[float] = None
    regression: bool = False
    new: bool = False


class HistoryLine(BaseModel):
    """One grid line (a cell key) and metric over the stored nights, with its change points."""

    key: str
    metric: str
    method: HistoryMethod
    nights: list[Night] = []
    changes: list[HistoryChange] = []


class VersionStep(BaseModel):
    """Neighbouring cells along the candidate's axis, in this run, whose values cross the criterion
    (the older version plays the good endpoint): where in the versions a regression entered, confirmed
    when re-measuring both cells still crosses, ``new`` when the baseline run did not have it."""

    line: str
    metric: str
    package: str
    good: str
    bad: str
    good_key: str
    bad_key: str
    good_value: float
    bad_value: float
    threshold: Optional[float] = None
    confirmed: Optional[bool] = None
    confirm_values: list[float] = []
    new: bool = True
    peaks: Optional[str] = None          # what the peaks behind a derived metric did (bisector.matrix.peaks_said)


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


class DraftNight(BaseModel):
    """One night of an issue draft's step: still there (``present``), gone, or not measured; the worst
    value on the bad side that night."""

    run_id: str
    created: str
    state: str
    value: Optional[float] = None
    versions: dict[str, str] = {}


class IssueDraft(BaseModel):
    """A draft upstream issue for one step (``file``: ``<package>-<version>-<metric>.md``), carried from
    night to night: where it was found (``kind``: a step along the versions, a confirmed regression
    against the baseline, a change point of the history), the level before it (``good_value``), the grid
    lines or cells it shows on, each night since, and the bisect that named its first bad release."""

    file: str
    package: str
    good: str
    version: str
    metric: str
    kind: str
    lines: list[str] = []
    line_is_cell: bool = False
    good_value: float
    bad_value: float
    first_run: str
    first_created: str
    status: str = "open"
    resolved_run: Optional[str] = None
    first_bad: Optional[str] = None
    bisect_run: Optional[str] = None
    nights: list[DraftNight] = []
    peaks: Optional[str] = None          # what the peaks behind a derived metric did at the step
    releases_between: Optional[list[str]] = None   # the index's releases between good and version (None: not read)


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
    invalid: list[InvalidCell] = []
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
    version_steps: list[VersionStep] = []
    history_lines: list[HistoryLine] = []
    issue_drafts: list[IssueDraft] = []

    @property
    def regressions(self) -> list[CellResult]:
        """The cells whose value crossed the criterion against the baseline."""
        return [c for c in self.cells if c.verdict is CellVerdict.REGRESSION]

    @property
    def confirmed(self) -> list[CellResult]:
        """The regressions a re-measurement confirmed."""
        return [c for c in self.regressions if c.confirmed]

    @property
    def new_steps(self) -> list[VersionStep]:
        """Confirmed steps along the versions that the baseline run did not have."""
        return [s for s in self.version_steps if s.confirmed and s.new]

    @property
    def new_changes(self) -> list[tuple[HistoryLine, HistoryChange]]:
        """E-Divisive change points in the regression's direction that no earlier run reported."""
        return [(line, c) for line in self.history_lines if line.method is HistoryMethod.E_DIVISIVE
                for c in line.changes if c.regression and c.new]

    @property
    def lost(self) -> list[CellResult]:
        """The cells not measured tonight that the baseline measured (or that no run measured yet)."""
        return [c for c in self.cells if c.verdict is CellVerdict.LOST]

    @property
    def unmeasured(self) -> list[CellResult]:
        """Every cell not measured whole: lost, known failures, failures that count as the regression,
        partial OOMs."""
        return [c for c in self.cells if not c.status.measured or c.oom or c.verdict is CellVerdict.LOST]

    @property
    def exit_code(self) -> int:
        """0 nothing found, 1 confirmed regression (against the baseline, along the versions, or a new
        change point of the history), 3 nothing could be measured, 4 cells lost (not measured tonight,
        though the baseline measured them or no run has yet)."""
        if not any(c.status.measured for c in self.cells):
            return 3
        if self.confirmed or self.new_steps or self.new_changes:
            return 1
        return CELLS_LOST if self.lost else 0


