"""One probe run of one candidate (verdict-free) and how it ended."""
from __future__ import annotations

import enum
import statistics
from typing import Any, Iterable, Optional

from pydantic import BaseModel, ValidationError, field_serializer, field_validator, model_validator

from bisector.core.facts import EnvFacts, ProbeResult


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
    details: dict[str, Any] = {}   # the run's own records beside the result (see ``detail``)
    run_id: Optional[str] = None
    reused: bool = False           # read from the store, taken by an earlier run (never stored itself)
    result: Optional[ProbeResult] = None   # the probe result's fields beside its metrics (None: it wrote none)
    env: Optional[EnvFacts] = None         # the environment as this measurement used it (None: never built)

    @model_validator(mode="before")
    @classmethod
    def _typed_once(cls, data: Any) -> Any:
        """A row as stored keeps the result and the environment in ``details``: typed here, once."""
        if not isinstance(data, dict) or not isinstance(data.get("details"), dict):
            return data
        details = dict(data["details"])
        raw_result, raw_env = details.pop("result", None), details.pop("env", None)
        data = {**data, "details": details}
        if "result" not in data:
            data["result"] = ProbeResult.of(raw_result) if isinstance(raw_result, dict) and raw_result else None
        if "env" not in data:
            try:
                data["env"] = EnvFacts.model_validate(raw_env) if isinstance(raw_env, dict) else None
            except ValidationError:
                data["env"] = None
        return data

    @field_validator("result", mode="before")
    @classmethod
    def _result_of(cls, value: Any) -> Any:
        """A result given as data (a JSON round trip, a Ray task's answer) is typed as a stored one is."""
        return ProbeResult.of(value) if isinstance(value, dict) else value

    @field_serializer("result")
    def _result_as_written(self, value: Optional[ProbeResult]) -> Optional[dict[str, Any]]:
        return value.fields() if value is not None else None

    def stored_details(self) -> dict[str, Any]:
        """``details`` as the store keeps them: the records, the result's fields and the environment."""
        out = dict(self.details)
        if self.result is not None:
            out["result"] = self.result.fields()
        if self.env is not None:
            out["env"] = self.env.model_dump(mode="json")
        return out

    def detail(self, name: str, default: Any = None) -> Any:
        """One of the run's own records beside the result (``stderr_tail``, ``launch``, ``proved``,
        ``env_seconds``, ``probe_seconds``), as stored."""
        return (self.details or {}).get(name, default)


def oom_cells(m: Measurement) -> list[str]:
    """The cells of a probe run that ran out of memory while others were measured (a partial OOM)."""
    cells = m.result.oom_cells if m.result else []
    return [str(c) for c in cells] if m.status is Status.OK else []


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
