"""One probe run of one candidate (verdict-free) and how it ended."""
from __future__ import annotations

import enum
import statistics
from typing import Any, Iterable, Optional

from pydantic import BaseModel, ValidationError, model_validator

from bisector.core.facts import EnvFacts, ResultFacts
from bisector.core.units import declare


class Status(enum.StrEnum):
    """How a measurement ended. String-valued: the store and the JSON reports hold the values."""

    OK = "ok"                      # the probe wrote valid metrics
    EXIT_CODE = "exit-code"        # an exit-code probe ran to its end (the code is the evidence)
    ENV_FAILED = "env-failed"      # the environment could not be built or failed its health check
    IMPORT_FAILED = "import-failed"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    BAD_OUTPUT = "bad-output"
    OOM = "oom"
    WRONG_DEVICE = "wrong-device"  # measured on another device or with another meter than the run
    LOST = "lost"                  # its worker or node died (or its objects were lost) on every retry
    RUNNING = "running"            # being taken (never stored)
    INTERRUPTED = "interrupted"

    @property
    def measured(self) -> bool:
        """The probe ran to its end: metrics (OK) or an exit code (EXIT_CODE)."""
        return self in (Status.OK, Status.EXIT_CODE)


RETRIED_ON_RERUN = frozenset({Status.ENV_FAILED, Status.INTERRUPTED, Status.LOST})


class Measurement(BaseModel):
    """One probe run of one candidate in one environment (verdict-free: verdicts come from a criterion)."""

    key: str
    package: str
    candidate: str
    env_fingerprint: str
    probe_fingerprint: str
    repeat: int = 0
    status: Status
    metrics: dict[str, float] = {}
    exit_code: Optional[int] = None
    reason: Optional[str] = None
    seconds: float
    created: str = ""
    details: dict[str, Any] = {}   # as stored; read through the typed views below
    run_id: Optional[str] = None

    @model_validator(mode="after")
    def _units_known(self) -> "Measurement":
        """The units its probe declares are known wherever its values are printed (bisector.core.units)."""
        declare_units(self)
        return self

    @property
    def result(self) -> Optional[ResultFacts]:
        """The probe result's declared fields beside its metrics (None: the probe wrote no result)."""
        data = (self.details or {}).get("result")
        return ResultFacts.of(data) if isinstance(data, dict) and data else None

    @property
    def env(self) -> Optional[EnvFacts]:
        """The environment as it was when this measurement used it (None: never built, or stored
        before environments were recorded with their measurements)."""
        data = (self.details or {}).get("env")
        try:
            return EnvFacts.model_validate(data) if isinstance(data, dict) else None
        except ValidationError:
            return None

    def detail(self, name: str, default: Any = None) -> Any:
        """One of the run's own records beside the result (``stderr_tail``, ``launch``, ``proved``,
        ``env_seconds``, ``probe_seconds``), as stored."""
        return (self.details or {}).get(name, default)


def declare_units(m: Measurement) -> None:
    """Make the units ``m``'s probe result declares (``"units": {metric: unit}``) known to the printers."""
    result = (m.details or {}).get("result")
    if isinstance(result, dict) and result.get("units"):
        declare(result["units"])


def oom_cells(m: Measurement) -> list[str]:
    """The cells of a probe run that ran out of memory while others were measured (a partial OOM)."""
    cells = m.result.oom_cells if m.result else []
    return [str(c) for c in cells] if m.status is Status.OK else []


def absent_reason(measurements: Iterable[Measurement], metric: Optional[str]) -> Optional[str]:
    """Why a probe that ran says it could not give ``metric`` (its result's ``absent``), if one says."""
    for m in measurements:
        why = m.result.absent.get(metric) if metric and m.result is not None else None
        if why:
            return str(why)[:300]
    return None


def metric_values(measurements: Iterable[Measurement], metric: str) -> list[float]:
    """The metric's value in every successful repeat that produced it."""
    return [m.metrics[metric] for m in measurements if m.status is Status.OK and metric in m.metrics]


def metric_value(measurements: Iterable[Measurement], metric: str) -> Optional[float]:
    """The median of the metric over successful repeats (None when no repeat produced it)."""
    values = metric_values(measurements, metric)
    return statistics.median(values) if values else None


def medians(measurements: list[Measurement]) -> dict[str, float]:
    """Each metric's median over the successful repeats, in first-seen order."""
    names = dict.fromkeys(k for m in measurements if m.status is Status.OK for k in m.metrics)
    return {k: metric_value(measurements, k) for k in names}
