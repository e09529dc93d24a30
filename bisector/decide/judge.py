"""Verdicts for candidates: repeats, the noise rule, failure classes, exit-code probes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from bisector.decide.seam import Measures
from bisector.core.candidate import Candidate
from bisector.core.criterion import Calibrated, Criterion, exit_code_verdict, failure_verdict
from bisector.core.measurement import Measurement, Status, medians, metric_value, metric_values, oom_cells
from bisector.core.stats import SampleEvidence
from bisector.core.verdict import Verdict


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
            return Judgement(verdict, f"{crit.metric}={value:.6g} vs {calibrated.threshold:.6g}", value, ms)
        if len(ms) >= crit.max_repeats:
            return Judgement(Verdict.SKIP, _unknown(calibrated, values, value), value, ms)
        ms.append(measurer.measure(c, first_repeat + len(ms)))


def _unknown(calibrated: Calibrated, values: list[float], value: float) -> str:
    crit = calibrated.criterion
    how = "straddle" if _side(calibrated, values) is None else f"have their median within ±{crit.noise:.6g} of"
    return (f"unknown: {len(values)} repeats of {crit.metric} {how} the threshold {calibrated.threshold:.6g} "
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


def _absent_why(m: Measurement, metric: Optional[str]) -> Optional[str]:
    """Why the probe says it could not give ``metric`` (the command meter's ``absent``), if it says."""
    result = m.result
    absent = (result.model_extra or {}).get("absent") if result is not None else None
    return str(absent.get(metric))[:300] if isinstance(absent, dict) and absent.get(metric) else None


def _no_value(ms: list[Measurement], crit: Criterion) -> Judgement:
    failed = [m for m in ms if m.status is not Status.OK]
    if not failed:
        why = next((w for w in (_absent_why(m, crit.metric) for m in ms) if w), None)
        return Judgement(Verdict.SKIP, f"metric {crit.metric} missing from the probe result"
                         + (f": {why}" if why else ""), None, ms)
    verdict, reason = failure_verdict(failed[-1], crit)
    return Judgement(verdict, f"{failed[-1].status.value}: {reason}", None, ms)
