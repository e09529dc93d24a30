"""When a candidate is BAD: a metric, a threshold rule, a direction, the noise band and the failure
classes; and every description of a rule the reports print (one place for all of them)."""
from __future__ import annotations

import enum
import math
import re
from typing import Optional

from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator, model_validator

from bisector.core.measurement import Measurement, Status
from bisector.core.stats import CONFIRM_ALPHA, CONFIRM_MISS
from bisector.core.strict_numbers import numbers
from bisector.core.units import human_value
from bisector.core.verdict import Verdict
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


STATS_REPEATS, STATS_MAX_REPEATS, STATS_MIN_EFFECT, STATS_ALPHA = 5, 100, "5%", 0.0002
MAX_REPEATS = 1000   # measurements of one candidate: beyond this a run would only end when killed


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
    _chosen: Optional[str] = PrivateAttr(default=None)   # the rule bisector chose, when the job gave none (said once)

    _numbers = numbers("threshold", "noise", "repeats", "max_repeats", "alpha")

    @property
    def should_confirm(self) -> bool:
        """Re-measure the boundary pair at the end: by default only for noisy metrics."""
        return self.confirm if self.confirm is not None else (self.repeats > 1 or self.noise > 0)

    @field_validator("max_increase", "min_effect")
    @classmethod
    def _parse_increase(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not _INCREASE.match(str(value)):
            raise ValueError(f"'{str(value)[:60]}' is not a percentage like '20%' or a number")
        return None if value is None else str(value)

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
            if self.threshold is not None or self.max_increase is not None or self.auto:
                raise ValueError("compare = stats judges by the samples: give min_effect, not threshold, "
                                 "max_increase or auto")
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
        rules = [self.threshold is not None, self.max_increase is not None, self.auto]
        if sum(rules) > 1:
            raise ValueError("give only one of threshold, max_increase, auto")
        if any(rules) and not self.metric:
            raise ValueError("a threshold rule needs a metric")
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

    def is_bad_value(self, value: float) -> bool:
        """Beyond the threshold in the regression's direction."""
        if self.criterion.direction is Direction.INCREASE:
            return value > self.threshold
        return value < self.threshold

    def in_band(self, value: float) -> bool:
        """Within the noise band around the threshold (no band without a noise level)."""
        noise = self.criterion.noise
        return noise > 0 and abs(value - self.threshold) <= noise

    def clearly_bad(self, value: float) -> bool:
        """Beyond the threshold and outside the noise band."""
        return self.is_bad_value(value) and not self.in_band(value)

    def describe(self) -> str:
        """'peak_bytes > 1.47e+08' (the result's ``criterion``), or the exit-code rule."""
        if self.criterion.compare is Compare.STATS:
            return describe_stats(self.criterion)
        if self.threshold is None:
            return FAILS_RULE if self.criterion.crash_is_bad and not self.criterion.metric else EXIT_CODE_RULE
        return _comparison(self.criterion, self.threshold)


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


def fails(measurements: list[Measurement]) -> bool:
    """Whether the last of a candidate's measurements failed as a program fails (crash, signal, out of memory)."""
    return bool(measurements) and measurements[-1].status in FAILURES


def program_fails(c: Criterion) -> Criterion:
    """``c`` turned into "the program fails": no metric, no rule, a crash BAD (what a crash bisect judges by)."""
    return Criterion.model_validate({**c.model_dump(exclude_unset=True), "metric": None, "threshold": None,
                                     "max_increase": None, "auto": False, "compare": Compare.THRESHOLD.value,
                                     "min_effect": None, "alpha": None, "crash_is_bad": True})


def failure_verdict(m: Measurement, criterion: Criterion) -> tuple[Verdict, str]:
    """The verdict for a measurement that did not produce metrics."""
    reason = m.reason or m.status.value
    if m.status is Status.OOM and criterion.oom_is_bad:
        return Verdict.BAD, f"out of memory counts as the regression: {reason}"
    if m.status is Status.TIMEOUT and criterion.timeout_is_bad:
        return Verdict.BAD, reason
    if m.status in (Status.CRASHED, Status.BAD_OUTPUT) and criterion.crash_is_bad:
        return Verdict.BAD, reason
    return Verdict.SKIP, reason


def exit_code_verdict(code: Optional[int], reason: Optional[str] = None) -> tuple[Verdict, str]:
    """git-bisect-run contract: 0 good, 125 skip, 1-127 bad; signals and >127 are skips."""
    if code == 0:
        return Verdict.GOOD, "exit 0"
    if code == 125 or code is None or code < 0 or code > 127:
        return Verdict.SKIP, reason or f"exit {code}"
    return Verdict.BAD, f"exit {code}" + (f": {reason}" if reason else "")


# -- descriptions ----------------------------------------------------------------------------------
def _comparison(criterion: Criterion, threshold: float) -> str:
    op = ">" if criterion.direction is Direction.INCREASE else "<"
    return f"{criterion.metric} {op} {human_value(threshold, criterion.metric)}"


def describe_against_baseline(c: Criterion) -> str:
    """The rule of a matrix run, where the baseline cell plays the good endpoint."""
    if c.threshold is not None:
        return _comparison(c, c.threshold)
    if c.max_increase is not None:
        way = "up" if c.direction is Direction.INCREASE else "down"
        return f"{c.metric} moves {way} more than {c.max_increase} from the baseline cell"
    return f"{c.metric} reported (no threshold)" if c.metric else "probe failures only (no metric criterion)"


def describe_stats(c: Criterion) -> str:
    """'step_seconds: worse than the good endpoint by >= 5% (MWU/KS p <= 0.001)'."""
    way = "higher" if c.direction is Direction.INCREASE else "lower"
    return f"{c.metric} {way} than the good endpoint's samples by >= {c.min_effect} (min of MWU and KS p <= {c.alpha:g})"


def _stats_rule_text(c: Criterion) -> str:
    return (f"samples interleaved with the good endpoint's (good, candidate, good, ...), a first round of {c.repeats} "
            f"pairs, then a pair at a time up to {c.max_repeats}; DIFFERENT when the smaller of the one-sided Mann-Whitney U and "
            f"Kolmogorov-Smirnov p-values against the good endpoint's samples is <= {c.alpha:g}: BAD when the "
            f"Hodges-Lehmann shift is at least {c.min_effect}, GOOD below half of it (between: another pair); SAME (GOOD) when that p-value is above "
            "the threshold a regression as large as the endpoints' (a conservative estimate) would stay below 99% of the time, or when the "
            f"bad endpoint's samples are worse than the candidate's at p <= {c.alpha:g} (never below p = 0.01 against "
            f"the good endpoint's), either only with a shift below {c.min_effect}; UNKNOWN asks for another "
            "pair, and is a SKIP (with its numbers) after the last; the culprit is confirmed on fresh interleaved samples "
            f"of the boundary pair (the first bad worse than the last good at p <= {CONFIRM_ALPHA:g} at any look, SAME when a "
            f"step as large as the endpoints' would show below it {1 - CONFIRM_MISS:.1%} of the time)")


def describe_rule(c: Criterion, exit_code_mode: bool = False) -> str:
    """The decision rule in words, as the report states it."""
    if exit_code_mode:
        return "probe exit code: 0 GOOD, 125 SKIP, 1-127 BAD; signals and codes above 127 SKIP"
    fails = (f"out of memory {'BAD' if c.oom_is_bad else 'SKIP'}, crash or bad output "
             f"{'BAD' if c.crash_is_bad else 'SKIP'}, timeout {'BAD' if c.timeout_is_bad else 'SKIP'}, "
             "broken environment SKIP")
    if c.compare is Compare.STATS:
        return f"{_stats_rule_text(c)}; failures: {fails}"
    if not c.metric:
        return f"a probe that succeeds is GOOD; failures: {fails}"
    if c.repeats == 1 and c.noise == 0:
        rule = "one measurement per candidate, BAD when it is beyond the threshold, else GOOD"
    else:
        noise = f" or their median is within ±{human_value(c.noise, c.metric)} of it" if c.noise else ""
        rule = (f"{c.repeats} measurement{'s' if c.repeats > 1 else ''} per candidate, up to {c.max_repeats} "
                f"while they straddle the threshold{noise}; BAD when all are beyond the threshold, GOOD "
                "when none is, otherwise SKIP (unknown)")
    return f"{rule}; failures: {fails}"
