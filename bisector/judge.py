"""Verdicts for candidates: repeats, the noise rule, failure classes, exit-code probes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .candidate import Candidate
from .criterion import Calibrated, exit_code_verdict, failure_verdict, metric_value
from .measure import Measurer
from .store import Measurement
from .verdict import Verdict


@dataclass
class Judgement:
    """A candidate's verdict with the evidence behind it."""

    verdict: Verdict
    reason: str
    value: Optional[float]
    measurements: list[Measurement] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(m.seconds for m in self.measurements)

    @property
    def metrics(self) -> dict[str, float]:
        ok = [m for m in self.measurements if m.status == "ok"]
        return dict(ok[-1].metrics) if ok else {}


def _side(calibrated: Calibrated, values: list[float]) -> Optional[bool]:
    """True if all values are bad, False if all are good, None if they straddle the threshold."""
    sides = {calibrated.is_bad_value(v) for v in values}
    return sides.pop() if len(sides) == 1 else None


def _in_band(calibrated: Calibrated, value: float) -> bool:
    return abs(value - calibrated.threshold) <= calibrated.criterion.noise


def judge(measurer: Measurer, calibrated: Calibrated, c: Candidate, first_repeat: int = 0) -> Judgement:
    """Measure ``repeats`` times; near the threshold measure again up to ``max_repeats``.

    Decision rule (stated in reports): BAD when every repeat is beyond the threshold, GOOD when
    none is; repeats that straddle it, or a median within the noise band after max_repeats,
    give SKIP ("unknown") with the reason.
    """
    crit = calibrated.criterion
    ms = [measurer.measure(c, first_repeat + i) for i in range(crit.repeats)]
    if measurer.probe.exit_code_mode:
        verdict, reason = exit_code_verdict(ms[-1])
        return Judgement(verdict, reason, None, ms)
    if not crit.metric:
        return _metric_free(ms)
    while True:
        value = metric_value(ms, crit.metric)
        if value is None:
            return _no_value(ms, crit)
        values = [m.metrics[crit.metric] for m in ms if m.status == "ok" and crit.metric in m.metrics]
        side = _side(calibrated, values)
        settled = side is not None and not (_in_band(calibrated, value) and len(ms) < crit.max_repeats)
        if settled:
            verdict = Verdict.BAD if side else Verdict.GOOD
            return Judgement(verdict, f"{crit.metric}={value:.6g} vs {calibrated.threshold:.6g}", value, ms)
        if len(ms) >= crit.max_repeats:
            return Judgement(Verdict.SKIP, f"unknown: {len(values)} repeats of {crit.metric} straddle or sit "
                             f"within noise of {calibrated.threshold:.6g} (median {value:.6g})", value, ms)
        ms.append(measurer.measure(c, first_repeat + len(ms)))


def _metric_free(ms: list[Measurement]) -> Judgement:
    """No metric criterion: a probe that succeeds is GOOD; failures follow their class."""
    m = ms[-1]
    if m.status == "ok":
        return Judgement(Verdict.GOOD, "probe succeeded", None, ms)
    return _no_value(ms, None)


def _no_value(ms: list[Measurement], crit) -> Judgement:
    failed = [m for m in ms if m.status != "ok"]
    if not failed:
        return Judgement(Verdict.SKIP, f"metric {crit.metric} missing from the probe result", None, ms)
    if crit is None:
        from .criterion import Criterion
        crit = Criterion()
    verdict, reason = failure_verdict(failed[-1], crit)
    return Judgement(verdict, f"{failed[-1].status}: {reason}", None, ms)
