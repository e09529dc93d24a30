"""Turn measurements into verdicts: a metric, a threshold rule, a direction, failure classes."""
from __future__ import annotations

import enum
import re
import statistics
from typing import Optional

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from .errors import UsageError
from .store import Measurement
from .verdict import Verdict

_INCREASE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*(%?)\s*$")


class Direction(str, enum.Enum):
    """Which way a regression moves the metric (memory goes up; throughput goes down)."""

    INCREASE = "increase"
    DECREASE = "decrease"


class Criterion(BaseModel):
    """When a candidate is BAD. Exactly one rule: ``threshold`` (absolute), ``max_increase``
    ("20%" or an absolute delta, relative to the good endpoint), or ``auto`` (midpoint between
    the endpoints, refused when they do not differ beyond ``noise``)."""

    model_config = ConfigDict(extra="forbid")

    metric: Optional[str] = None
    threshold: Optional[float] = None
    max_increase: Optional[str] = None
    auto: bool = False
    direction: Direction = Direction.INCREASE
    noise: float = 0.0
    repeats: int = 1
    max_repeats: int = 5
    crash_is_bad: bool = False
    oom_is_bad: bool = True
    timeout_is_bad: bool = False
    confirm: Optional[bool] = None

    @property
    def should_confirm(self) -> bool:
        """Re-measure the boundary pair at the end: by default only for noisy metrics."""
        return self.confirm if self.confirm is not None else (self.repeats > 1 or self.noise > 0)

    @field_validator("max_increase")
    @classmethod
    def _parse_increase(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not _INCREASE.match(str(value)):
            raise ValueError(f"'{value}' is not a percentage like '20%' or a number")
        return None if value is None else str(value)

    @model_validator(mode="after")
    def _one_rule(self) -> "Criterion":
        rules = [self.threshold is not None, self.max_increase is not None, self.auto]
        if sum(rules) > 1:
            raise ValueError("give only one of threshold, max_increase, auto")
        if any(rules) and not self.metric:
            raise ValueError("a threshold rule needs a metric")
        if self.repeats < 1 or self.max_repeats < self.repeats:
            raise ValueError("repeats must be >= 1 and <= max_repeats")
        if self.noise < 0:
            raise ValueError("noise must be >= 0")
        return self

    @property
    def uses_metric(self) -> bool:
        return self.metric is not None


class Calibrated(BaseModel):
    """A criterion with its threshold fixed (after the endpoints were measured when relative)."""

    criterion: Criterion
    threshold: Optional[float] = None
    good_value: Optional[float] = None
    bad_value: Optional[float] = None

    def is_bad_value(self, value: float) -> bool:
        if self.criterion.direction is Direction.INCREASE:
            return value > self.threshold
        return value < self.threshold

    def describe(self) -> str:
        if self.threshold is None:
            return "probe exit code (0 good, 125 skip, 1-127 bad)"
        op = ">" if self.criterion.direction is Direction.INCREASE else "<"
        return f"{self.criterion.metric} {op} {self.threshold:.6g}"


def needs_endpoints(criterion: Criterion) -> bool:
    """True when the threshold depends on the endpoints' values."""
    return criterion.max_increase is not None or criterion.auto


def calibrate(criterion: Criterion, good: Optional[float] = None, bad: Optional[float] = None) -> Calibrated:
    """Fix the threshold; relative rules need the good endpoint's value (auto needs both)."""
    c = criterion
    if c.threshold is not None:
        return Calibrated(criterion=c, threshold=c.threshold, good_value=good, bad_value=bad)
    if c.max_increase is not None:
        number, pct = _INCREASE.match(c.max_increase).groups()
        delta = abs(good) * float(number) / 100 if pct else float(number)
        sign = 1 if c.direction is Direction.INCREASE else -1
        return Calibrated(criterion=c, threshold=good + sign * delta, good_value=good, bad_value=bad)
    if c.auto:
        if good is None or bad is None or abs(bad - good) <= max(c.noise, 1e-12):
            raise UsageError(f"auto criterion: endpoints do not differ beyond noise "
                             f"({c.metric}: good {good}, bad {bad}, noise {c.noise})")
        return Calibrated(criterion=c, threshold=(good + bad) / 2, good_value=good, bad_value=bad)
    return Calibrated(criterion=c)


def metric_value(measurements: list[Measurement], metric: str) -> Optional[float]:
    """The median of the metric over successful repeats (None when no repeat produced it)."""
    values = [m.metrics[metric] for m in measurements if m.status == "ok" and metric in m.metrics]
    return statistics.median(values) if values else None


def failure_verdict(m: Measurement, criterion: Criterion) -> tuple[Verdict, str]:
    """The verdict for a measurement that did not produce metrics."""
    reason = m.reason or m.status
    if m.status == "oom" and criterion.oom_is_bad:
        return Verdict.BAD, f"out of memory counts as the regression: {reason}"
    if m.status == "timeout" and criterion.timeout_is_bad:
        return Verdict.BAD, reason
    if m.status in ("crashed", "bad-output") and criterion.crash_is_bad:
        return Verdict.BAD, reason
    return Verdict.SKIP, reason


def exit_code_verdict(m: Measurement) -> tuple[Verdict, str]:
    """git-bisect-run contract: 0 good, 125 skip, 1-127 bad; signals and >127 are skips."""
    code = m.exit_code
    if code == 0:
        return Verdict.GOOD, "exit 0"
    if code == 125 or code is None or code < 0 or code > 127:
        return Verdict.SKIP, m.reason or f"exit {code}"
    return Verdict.BAD, f"exit {code}" + (f": {m.reason}" if m.reason else "")
