"""Verdicts for candidates: repeats, the noise rule, failure classes, exit-code probes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from bisector.decide.seam import Measures
from bisector.core.candidate import Candidate
from bisector.core.criterion import Calibrated, Criterion
from bisector.core.failure_rule import exit_code_verdict, failure_verdict
from bisector.core.measurement import (Measurement, Status, absent_reason, medians, metric_value, metric_values,
                                      oom_cells)
from bisector.core.stats import SampleEvidence
from bisector.core.verdict import Verdict
from bisector.errors import UsageError


@dataclass
class Judgement:
    """A candidate's verdict with the evidence behind it (in stats mode also the samples compared)."""

    verdict: Verdict
    reason: str
    value: Optional[float]
    measurements: list[Measurement] = field(default_factory=list)
    evidence: Optional[SampleEvidence] = None

    @property
    def seconds(self) -> float:
        """Time spent on all its measurements."""
        return sum(m.seconds for m in self.measurements)

    @property
    def metrics(self) -> dict[str, float]:
        """Each metric's median over the successful repeats (so ``metrics[metric] == value``)."""
        return medians(self.measurements)


def refuse_bad_input(bad_input: Callable[[Measurement], Optional[str]], measurements: Iterable[Measurement]) -> None:
    """UsageError (exit 2) at the first measurement that shows the job's settings were bad input (a program's
    ``--measure-skip`` beyond the optimizer steps it took): known only once it ran, never a SKIP."""
    for m in measurements:
        why = bad_input(m)
        if why:
            raise UsageError(why)


def _side(calibrated: Calibrated, values: list[float]) -> Optional[bool]:
    """True if all values are bad, False if all are good, None if they straddle the threshold."""
    sides = {calibrated.is_bad_value(v) for v in values}
    return sides.pop() if len(sides) == 1 else None


def judge(measurer: Measures, calibrated: Calibrated, c: Candidate, first_repeat: int = 0) -> Judgement:
    """Measure ``repeats`` times; near the threshold measure again up to ``max_repeats``.

    Decision rule (stated in reports): BAD when every repeat is beyond the threshold, GOOD when
    none is, provided the median is outside the noise band; while the repeats straddle the
    threshold or their median is within the band, measure again. Still so after max_repeats:
    SKIP ("unknown") with the reason. With ``noise`` 0 there is no band.
    """
    crit = calibrated.criterion
    ms = [measurer.measure(c, first_repeat + i) for i in range(crit.repeats)]
    if measurer.exit_code_mode:
        verdict, reason = exit_code_verdict(ms[-1].exit_code, ms[-1].reason)
        return Judgement(verdict, reason, None, ms)
    partial = _partial_oom(ms, crit)
    if partial is not None:
        return partial
    if not crit.metric:
        return _metric_free(ms, crit)
    while True:
        value = metric_value(ms, crit.metric)
        if value is None:
            return _no_value(ms, crit)
        values = metric_values(ms, crit.metric)
        side = _side(calibrated, values)
        if side is not None and not calibrated.in_band(value):
            verdict = Verdict.BAD if side else Verdict.GOOD
            return Judgement(verdict, calibrated.versus(value), value, ms)
        if len(ms) >= crit.max_repeats:
            return Judgement(Verdict.SKIP, _unknown(calibrated, values, value), value, ms)
        ms.append(measurer.measure(c, first_repeat + len(ms)))


def _unknown(calibrated: Calibrated, values: list[float], value: float) -> str:
    crit = calibrated.criterion
    how = "straddle" if _side(calibrated, values) is None else f"have their median within ±{crit.noise:.6g} of"
    limit = (f"the threshold {calibrated.threshold:.6g}" if calibrated.tolerance is None else
             f"the tolerance ±{calibrated.tolerance:.6g} around {calibrated.good_value!r}")
    return (f"unknown: {len(values)} repeats of {crit.metric} {how} {limit} "
            f"(median {value:.6g}, range {min(values):.6g}..{max(values):.6g})")


def _partial_oom(ms: list[Measurement], crit: Criterion) -> Optional[Judgement]:
    """Some cells ran out of memory while the rest were measured: with ``oom_is_bad`` that is the
    regression (an OOM in the largest GA=2 cell must not hide behind the cells that fit)."""
    cells = sorted({c for m in ms for c in oom_cells(m)})
    if not cells or not crit.oom_is_bad:
        return None
    return Judgement(Verdict.BAD, f"out of memory counts as the regression: cells {', '.join(cells)} ran out of "
                                  "memory", metric_value(ms, crit.metric) if crit.metric else None, ms)


def _metric_free(ms: list[Measurement], crit: Criterion) -> Judgement:
    """No metric criterion: a probe that succeeds is GOOD; failures follow their class."""
    if ms[-1].status is Status.OK:
        return Judgement(Verdict.GOOD, "probe succeeded", None, ms)
    return _no_value(ms, crit)


def missing_why(ms: list[Measurement], metric: Optional[str]) -> str:
    """Why ``ms`` give no ``metric``: a failed run's reason, else the probe's own reason for leaving it out
    (the command meter's ``absent``: no optimizer step, every step left out as warm-up), else that it is
    missing from the result."""
    failed = [m for m in ms if m.status is not Status.OK]
    if failed:
        return failed[-1].reason or failed[-1].status.value
    why = absent_reason(ms, metric)
    return f"metric {metric} missing from the probe result" + (f": {why}" if why else "")


def _no_value(ms: list[Measurement], crit: Criterion) -> Judgement:
    failed = [m for m in ms if m.status is not Status.OK]
    if not failed:
        return Judgement(Verdict.SKIP, missing_why(ms, crit.metric), None, ms)
    verdict, reason = failure_verdict(failed[-1], crit)
    return Judgement(verdict, f"{failed[-1].status.value}: {reason}", None, ms)
