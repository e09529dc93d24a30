"""A matrix run's results: each cell against its baseline, bisects attached, the whole run."""
from __future__ import annotations

import enum
from typing import Optional

from pydantic import BaseModel

from bisector.core.measurement import Status

MATRIX_SCHEMA = "bisector.matrix/1"


class CellVerdict(enum.StrEnum):
    """A cell against its baseline cell."""

    NEW = "new"                # no baseline cell
    SAME = "same"
    MOVED = "moved"            # the value changed without crossing the criterion
    REGRESSION = "regression"  # crossed the criterion (``confirmed`` says whether it held on re-measurement)
    FAILED = "failed"


class BaselineCell(BaseModel):
    """What the baseline run measured at a cell's grid position."""

    versions: dict[str, str]
    status: Status
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
    status: Status
    metrics: dict[str, float] = {}
    reason: Optional[str] = None
    exit_code: Optional[int] = None
    bad_failure: bool = False
    measurements: list[str] = []
    reused: bool = False
    baseline: Optional[BaselineCell] = None
    verdict: CellVerdict = CellVerdict.NEW
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
        """The cells whose value crossed the criterion against the baseline."""
        return [c for c in self.cells if c.verdict is CellVerdict.REGRESSION]

    @property
    def confirmed(self) -> list[CellResult]:
        """The regressions a re-measurement confirmed."""
        return [c for c in self.regressions if c.confirmed]

    @property
    def exit_code(self) -> int:
        """0 no regression, 1 confirmed regression, 3 nothing could be measured."""
        if not any(c.status.measured for c in self.cells):
            return 3
        return 1 if self.confirmed else 0


