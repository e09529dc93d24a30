"""When a candidate is BAD: a metric, a rule (one-sided: a threshold, a rise from the good end, the midpoint; two-sided:
a change in either direction, or any change at all), a direction, the noise band and the failure classes; a rule's
one line as a result states it (the whole rule in words: bisector.core.rule_text)."""
from __future__ import annotations

import enum
import math
import re
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from bisector.core.measurement import Status
from bisector.core.strict_numbers import numbers
from bisector.core.units import human_value
from bisector.errors import UsageError

_INCREASE = re.compile(r"^\s*([0-9]{0,15}\.?[0-9]{1,15}(?:[eE][+-]?\d{1,3})?)\s*(%?)\s*$")   # digits bounded
EXIT_CODE_RULE = "probe exit code (0 good, 125 skip, 1-127 bad)"
FAILS_RULE = "the probe fails: a non-zero exit, a signal or out of memory is BAD, a run that succeeds GOOD"
FAILURES = (Status.CRASHED, Status.OOM)   # what "the program fails" counts (a timeout or a broken environment: SKIP)


class Direction(enum.StrEnum):
    """Which way a regression moves the metric (memory goes up; throughput goes down)."""

    INCREASE = "increase"
    DECREASE = "decrease"


class Compare(enum.StrEnum):
    """How a candidate's measurements are judged: against a threshold, or statistically against the
    good endpoint's samples (for noisy metrics such as time)."""

    THRESHOLD = "threshold"
    STATS = "stats"
    EXACT = "exact"   # bit-equality with the good endpoint's value: any change is BAD (a deterministic program's numbers)


STATS_REPEATS, STATS_MAX_REPEATS, STATS_MIN_EFFECT, STATS_ALPHA = 5, 100, "5%", 0.0002
MAX_REPEATS = 1000   # measurements of one candidate: beyond this a run would only end when killed
AUTO_CHANGE_SPREADS = 5   # --max-change auto: the tolerance is this many times the good end's own spread


def fewest_pairs(alpha: float) -> int:
    """The fewest pairs of samples whose comparison can reach p <= ``alpha`` at all (the smallest one-sided
    p-value of n against n samples, perfectly separated, is 1 / C(2n, n))."""
    n = 1
    while 1 / math.comb(2 * n, n) > alpha:
        n += 1
    return n


class Criterion(BaseModel):
    """When a candidate is BAD. Exactly one rule: ``threshold`` (absolute), ``max_increase``
    ("20%" or an absolute delta, relative to the good endpoint), or ``auto`` (midpoint between
    the endpoints, refused when they do not differ beyond ``noise``). With ``compare = "stats"``
    none of them: BAD when the samples differ from the good endpoint's (``alpha``) by at least
    ``min_effect`` ("5%" or an absolute shift); ``repeats`` pairs per round, up to ``max_repeats``."""

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
    compare: Compare = Compare.THRESHOLD
    min_effect: Optional[str] = None
    alpha: Optional[float] = None   # stats mode only (default STATS_ALPHA there)
    # two-sided: BAD when the value moves more than this from the good end's, either way ("1%", "0.01", "auto");
    # written only where given, so a job without it keeps the config hash it always had
    max_change: Optional[str] = Field(default=None, exclude_if=lambda v: v is None)
    _chosen: Optional[str] = PrivateAttr(default=None)   # the rule bisector chose, when the job gave none (said once)

    _numbers = numbers("threshold", "noise", "repeats", "max_repeats", "alpha")

    @property
    def should_confirm(self) -> bool:
        """Re-measure the boundary pair at the end: by default only for noisy metrics."""
        return self.confirm if self.confirm is not None else (self.repeats > 1 or self.noise > 0)

    @property
    def two_sided(self) -> bool:
        """BAD on a change in either direction from the good end (``max_change``, ``compare = exact``)."""
        return self.max_change is not None or self.compare is Compare.EXACT

    @field_validator("max_increase", "min_effect")
    @classmethod
    def _parse_increase(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not _INCREASE.match(str(value)):
            raise ValueError(f"'{str(value)[:60]}' is not a percentage like '20%' or a number")
        return None if value is None else str(value)

    @field_validator("max_change")
    @classmethod
    def _parse_change(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and str(value).strip() != "auto" and not _INCREASE.match(str(value)):
            raise ValueError(f"'{str(value)[:60]}' is not a change like '1%', '0.01' or 'auto'")
        return None if value is None else str(value).strip()

    @model_validator(mode="before")
    @classmethod
    def _stats_defaults(cls, data):
        """Stats mode samples a first round of 5 pairs, then a pair at a time up to 100, unless told otherwise; floor 5%."""
        if isinstance(data, dict) and str(data.get("compare") or "") == Compare.STATS:
            data = {"repeats": STATS_REPEATS, "max_repeats": STATS_MAX_REPEATS, "min_effect": STATS_MIN_EFFECT,
                    "alpha": STATS_ALPHA, **{k: v for k, v in data.items() if v is not None}}
        return data

    @model_validator(mode="after")
    def _stats_rule(self) -> "Criterion":
        if self.compare is Compare.STATS:
            if not self.metric:
                raise ValueError("compare = stats needs a metric")
            if self.threshold is not None or self.max_increase is not None or self.auto or self.max_change:
                raise ValueError("compare = stats judges by the samples: give min_effect, not threshold, "
                                 "max_increase, max_change or auto")
            if not 0 < self.alpha < 0.5:
                raise ValueError("alpha must be between 0 and 0.5")
            if self.max_repeats < fewest_pairs(self.alpha):
                raise ValueError(f"compare = stats at alpha {self.alpha:g} needs at least {fewest_pairs(self.alpha)} "
                                 f"pairs of samples before any two can be told apart; max_repeats is "
                                 f"{self.max_repeats}")
        elif self.min_effect is not None or self.alpha is not None:
            given = " and ".join(k for k in ("min_effect", "alpha") if getattr(self, k) is not None)
            raise ValueError(f"{given} {'are' if ' and ' in given else 'is'} for compare = stats (--compare stats), "
                             "which this criterion does not use")
        return self

    def effect_floor(self, good_median: float) -> float:
        """The smallest shift (metric units) stats mode calls a regression: ``min_effect`` of the good
        median ("5%") or as given."""
        number, pct = _INCREASE.match(self.min_effect or "0").groups()
        return abs(good_median) * float(number) / 100 if pct else float(number)

    @model_validator(mode="after")
    def _one_rule(self) -> "Criterion":
        rules = [self.threshold is not None, self.max_increase is not None, self.auto, self.max_change is not None]
        if sum(rules) > 1:
            raise ValueError("give only one of threshold, max_increase, max_change, auto")
        if any(rules) and not self.metric:
            raise ValueError("a threshold rule needs a metric")
        if self.compare is Compare.EXACT and (any(rules) or not self.metric):
            raise ValueError("compare = exact is bit-equality of a metric with the good end's: give a metric and no "
                             "threshold, max_increase, max_change or auto")
        if self.repeats < 1 or self.max_repeats < self.repeats:
            raise ValueError("repeats must be >= 1 and <= max_repeats")
        if self.max_repeats > MAX_REPEATS:
            raise ValueError(f"max_repeats must be at most {MAX_REPEATS} (repeats {self.repeats}, max_repeats "
                             f"{self.max_repeats})")
        if self.noise < 0:
            raise ValueError("noise must be >= 0")
        return self


class Calibrated(BaseModel):
    """A criterion with its threshold fixed (after the endpoints were measured when relative)."""

    criterion: Criterion
    threshold: Optional[float] = None
    good_value: Optional[float] = None
    bad_value: Optional[float] = None
    tolerance: Optional[float] = None   # a two-sided rule: how far from good_value a value may be, either way

    def is_bad_value(self, value: float) -> bool:
        """Beyond the threshold in the regression's direction (a two-sided rule: beyond the tolerance either way)."""
        if self.tolerance is not None:
            return abs(value - self.good_value) > self.tolerance
        if self.criterion.direction is Direction.INCREASE:
            return value > self.threshold
        return value < self.threshold

    def in_band(self, value: float) -> bool:
        """Within the noise band around the threshold (no band without a noise level)."""
        noise = self.criterion.noise
        return noise > 0 and self.threshold is not None and abs(value - self.threshold) <= noise

    def clearly_bad(self, value: float) -> bool:
        """Beyond the threshold and outside the noise band."""
        return self.is_bad_value(value) and not self.in_band(value)

    def describe(self) -> str:
        """'peak_bytes > 1.47e+08' (the result's ``criterion``), or the exit-code rule."""
        if self.criterion.compare is Compare.STATS:
            return describe_stats(self.criterion)
        if self.tolerance is not None:
            return describe_change(self.criterion, self.good_value, self.tolerance)
        if self.threshold is None:
            return FAILS_RULE if self.criterion.crash_is_bad and not self.criterion.metric else EXIT_CODE_RULE
        return _comparison(self.criterion, self.threshold)


    def versus(self, value: float) -> str:
        """A judged value against the rule, as a step's reason says it."""
        if self.tolerance is not None:
            return f"{self.criterion.metric}={value!r} vs {self.good_value!r} ± {self.tolerance:.6g}"
        metric = self.criterion.metric
        return f"{metric}={human_value(value, metric)} vs {human_value(self.threshold, metric)}"


def needs_endpoints(criterion: Criterion) -> bool:
    """True when the threshold depends on the endpoints' values."""
    return criterion.max_increase is not None or criterion.auto or criterion.two_sided


def change_tolerance(c: Criterion, good: float, spread: Optional[float] = None) -> float:
    """How far from the good end's ``good`` a two-sided rule lets a value go: 0 for exact, ``max_change`` of
    ``good`` ("1%") or as given, or for "auto" ``AUTO_CHANGE_SPREADS`` times the good end's own ``spread``."""
    if c.compare is Compare.EXACT:
        return 0.0
    if c.max_change == "auto":
        if spread is None:
            raise UsageError("--max-change auto takes its tolerance from the good end's repeats, which this run has not "
                             "measured (a matrix has no good end to repeat: give --max-change X)")
        return AUTO_CHANGE_SPREADS * spread
    number, pct = _INCREASE.match(c.max_change).groups()
    return abs(good) * float(number) / 100 if pct else float(number)


def calibrate(criterion: Criterion, good: Optional[float] = None, bad: Optional[float] = None,
              spread: Optional[float] = None) -> Calibrated:
    """Fix the threshold; relative rules need the good endpoint's value (auto needs both; a two-sided "auto" the
    spread of the good end's repeats)."""
    c = criterion
    if c.two_sided:
        return Calibrated(criterion=c, tolerance=change_tolerance(c, good, spread), good_value=good, bad_value=bad)
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


# -- descriptions ----------------------------------------------------------------------------------
def _comparison(criterion: Criterion, threshold: float) -> str:
    op = ">" if criterion.direction is Direction.INCREASE else "<"
    return f"{criterion.metric} {op} {human_value(threshold, criterion.metric)}"


def describe_change(c: Criterion, good: float, tolerance: float) -> str:
    """'grad_norm_first moves more than 0.0143 (1%) from 1.4276, either way' or the exact rule."""
    if tolerance == 0:
        return f"{c.metric} differs from the good end's {good!r} at all (bit-equality)"
    given = f" ({c.max_change})" if c.max_change not in (None, "auto") and c.max_change.endswith("%") else ""
    return (f"{c.metric} moves more than {human_value(tolerance, c.metric)}{given} from the good end's "
            f"{human_value(good, c.metric)}, either way")


def describe_stats(c: Criterion) -> str:
    """'step_seconds: worse than the good endpoint by >= 5% (MWU/KS p <= 0.001)'."""
    way = "higher" if c.direction is Direction.INCREASE else "lower"
    return f"{c.metric} {way} than the good endpoint's samples by >= {c.min_effect} (min of MWU and KS p <= {c.alpha:g})"
