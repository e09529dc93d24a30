"""Stats mode (``compare = "stats"``): a candidate is judged by its samples against the good endpoint's,
taken interleaved (good, candidate, good, candidate, ...) so that drift of the machine hits both sides.

The good endpoint is the reference: its samples from the endpoints' round, from the candidates judged
in earlier search batches, and those interleaved with this candidate; when the interleaved ones differ
from the earlier ones (the machine drifted: a load burst), only the interleaved ones count, and the
bad endpoint's (earlier) samples are not consulted. Verdicts (see :mod:`bisector.core.stats`):
DIFFERENT and worse by at least ``min_effect`` is BAD; DIFFERENT by less than half of it is GOOD, and
in between takes more samples (the shift's estimate settles); SAME is GOOD, also when the bad
endpoint's samples are worse than the candidate's, provided the shift is below ``min_effect``; UNKNOWN
takes another pair (after a first round of ``repeats``), and after ``max_repeats`` is a SKIP with its
numbers. The culprit is confirmed by the boundary pair's fresh samples compared with each other.

Each comparison first readies both sides at once (``Measures.warm``: their environments and warm workers,
so each interleaved sample costs its step and a fork, and the endpoints' two workers start together).
Every sample is a stored measurement with its own repeat index, so a resumed run asks for exactly the
same measurements and reuses all of them: the candidate's own repeats count from ``first_repeat``,
and the good endpoint's repeats for slot ``s`` are ``s * max_repeats`` onwards (slot 0: the
endpoints' round; slot ``i``: search index ``i``; slot ``n``: the confirmation, when the last good
candidate is the good endpoint itself).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Optional

from bisector.decide.judge import Judgement, missing_why
from bisector.decide.seam import Measures
from bisector.core.candidate import Candidate
from bisector.core.criterion import Criterion, Direction
from bisector.core.failure_rule import failure_verdict
from bisector.core.measurement import Measurement, Status
from bisector.core.stats import (CONFIRM_ALPHA, CONFIRM_MISS, MISS, SAME_FLOOR, Comparison, SampleComparison,
                                 SampleEvidence, compare_samples, drifted, superiority_lower_bound)
from bisector.core.verdict import Verdict

ENDPOINT_RULE_OUT = 0.75   # the endpoints are SAME when a regression making 3 runs in 4 slower is ruled out
ENDPOINT_MIN_PAIRS = 12    # the endpoints' round keeps sampling to this many pairs (the reference; it grows with
                           # the good samples taken with every candidate)


@dataclass
class _Samples:
    """One side's measurements so far and their metric values (successful ones only)."""

    measurements: list[Measurement]
    failed: Optional[Measurement] = None

    def values(self, metric: str) -> list[float]:
        return [m.metrics[metric] for m in self.measurements if m.status is Status.OK and metric in m.metrics]


class PairedJudge:
    """Judges candidates of one phase against the good endpoint ``good`` (the bad endpoint ``bad``
    gives the size of regression SAME rules out); ``n`` is the phase's candidate count (for slots)."""

    def __init__(self, measurer: Measures, criterion: Criterion, good: Candidate, bad: Candidate, n: int):
        self.measurer, self.criterion, self.good, self.bad, self.n = measurer, criterion, good, bad, n
        self.metric: str = criterion.metric or ""
        self.increase = criterion.direction is Direction.INCREASE
        self.reference: list[Measurement] = []     # the good samples every candidate is compared with
        self.bad_samples: list[float] = []
        self.rule_out = 0.5
        self._finished: dict[int, list[Measurement]] = {}   # slot -> good samples taken with it, not yet pooled
        self._lock = threading.Lock()

    # -- the endpoints ------------------------------------------------------------------------------
    def endpoints(self) -> tuple[Judgement, Judgement]:
        """Sample good and bad interleaved until they decide, and at least ``ENDPOINT_MIN_PAIRS`` pairs (the
        reference for every candidate after them); the good endpoint is GOOD by definition, the bad one BAD when it is worse by at
        least ``min_effect``, GOOD when it is not, SKIP when still UNKNOWN after ``max_repeats``."""
        good, bad = _Samples([]), _Samples([])
        self.measurer.warm([(self.good, 0), (self.bad, 0)])  # both workers start at once
        while True:
            self._round(good, self.good, 0, bad, self.bad, 0)
            j = self._verdict(bad, good.values(self.metric), ENDPOINT_RULE_OUT, endpoint=True)
            undecided = j.evidence is not None and j.verdict is Verdict.SKIP
            more = j.evidence is not None and (undecided or len(bad.measurements) < ENDPOINT_MIN_PAIRS)
            if not more or len(bad.measurements) >= self.criterion.max_repeats:
                break
        self.reference = [m for m in good.measurements if m.status is Status.OK and self.metric in m.metrics]
        self.bad_samples = bad.values(self.metric)
        reference = self._values(self.reference)
        if j.verdict is Verdict.BAD:
            self.rule_out = max(0.5, superiority_lower_bound(reference, self.bad_samples, self.increase))
        good_j = Judgement(Verdict.GOOD, f"the reference: {len(reference)} samples", _median(reference),
                           good.measurements)
        return good_j, j

    # -- candidates ---------------------------------------------------------------------------------
    def pool_finished(self) -> None:
        """Add the good samples taken with the candidates judged so far to the reference, in slot order
        (called between search batches, so every candidate of a batch sees the same reference)."""
        with self._lock:
            for slot in sorted(self._finished):
                self.reference.extend(self._finished[slot])
            self._finished.clear()

    def judge(self, c: Candidate, slot: int, first_repeat: int = 0) -> Judgement:
        """Sample ``c`` and the good endpoint interleaved, round by round, until the comparison decides."""
        with self._lock:
            reference = self._values(self.reference)
        own, cand = _Samples([]), _Samples([])
        self.measurer.warm([(self.good, slot * self.criterion.max_repeats), (c, first_repeat)])
        while True:
            self._round(own, self.good, slot * self.criterion.max_repeats, cand, c, first_repeat)
            now = own.values(self.metric)
            steady = not drifted(reference, now)  # else only the interleaved good samples are a fair reference
            j = self._verdict(cand, reference + now if steady else now, self.rule_out, against_bad=steady)
            if j.verdict is not Verdict.SKIP or j.evidence is None or len(cand.measurements) >= self.criterion.max_repeats:
                break
        with self._lock:
            self._finished[slot] = [m for m in own.measurements if m.status is Status.OK and self.metric in m.metrics]
        return j

    def confirm_step(self, last_good: Candidate, good_first: int, first_bad: Candidate, bad_first: int,
                     alpha: float = CONFIRM_ALPHA, miss: float = CONFIRM_MISS) -> Judgement:
        """The culprit's step confirmed directly: fresh samples of the boundary pair, interleaved (last
        good, first bad, ...), until ``first_bad`` is told apart from ``last_good``; BAD confirms it. A
        replication of what the search found at the criterion's alpha, it asks for p <= ``alpha``
        (``CONFIRM_ALPHA``) at each look, and SAME rules out the step missing it with ``miss``
        (``CONFIRM_MISS``): a false culprit has to pass both, and drift hits both sides of these pairs."""
        ref, cand = _Samples([]), _Samples([])
        self.measurer.warm([(last_good, good_first), (first_bad, bad_first)])
        while True:
            self._round(ref, last_good, good_first, cand, first_bad, bad_first)
            j = self._verdict(cand, ref.values(self.metric), self.rule_out, against_bad=False,
                              alpha=max(self.criterion.alpha, alpha), miss=miss)
            if j.verdict is not Verdict.SKIP or j.evidence is None or len(cand.measurements) >= self.criterion.max_repeats:
                return Judgement(j.verdict, f"against {last_good.short}'s fresh samples: {j.reason}", j.value,
                                 ref.measurements + cand.measurements, evidence=j.evidence)

    # -- helpers ------------------------------------------------------------------------------------
    def _round(self, ref: _Samples, ref_c: Candidate, ref_first: int, side: _Samples, c: Candidate, first: int) -> None:
        """The first round: ``repeats`` pairs (a good sample, then the candidate's, and again); after it,
        one pair per look, so a comparison stops as soon as it decides (a round of five would overshoot
        by two pairs on average)."""
        for _ in range(self.criterion.repeats if not side.measurements else 1):
            if len(side.measurements) >= self.criterion.max_repeats:
                return
            ref.measurements.append(self.measurer.measure(ref_c, ref_first + len(ref.measurements)))
            m = self.measurer.measure(c, first + len(side.measurements))
            side.measurements.append(m)
            if m.status is not Status.OK:
                side.failed = m
                return

    def _values(self, ms: list[Measurement]) -> list[float]:
        return [m.metrics[self.metric] for m in ms if m.status is Status.OK and self.metric in m.metrics]

    def _compare(self, reference: list[float], values: list[float], rule_out: float,
                 alpha: Optional[float] = None, miss: float = MISS) -> Optional[SampleComparison]:
        if not reference or not values:
            return None
        return compare_samples(reference, values, increase=self.increase, alpha=alpha or self.criterion.alpha,
                               rule_out=rule_out, miss=miss)

    def _verdict(self, side: _Samples, reference: list[float], rule_out: float, endpoint: bool = False,
                 against_bad: bool = True, alpha: Optional[float] = None, miss: float = MISS) -> Judgement:
        """The verdict of the samples so far (SKIP while UNKNOWN; failures by their class)."""
        values = side.values(self.metric)
        if side.failed is not None or not values:
            return _failure(side, self.criterion, self.metric)
        if not reference:
            return Judgement(Verdict.SKIP, "the good endpoint gave no samples to compare with",
                             _median(values), side.measurements)
        vs_good = self._compare(reference, values, rule_out, alpha, miss)
        vs_bad = None
        if vs_good.comparison is not Comparison.DIFFERENT and not endpoint and against_bad and self.bad_samples:
            vs_bad = compare_samples(values, self.bad_samples, increase=self.increase, alpha=self.criterion.alpha)
        evidence = SampleEvidence(samples=values, reference=reference, vs_good=vs_good, vs_bad=vs_bad,
                                  rule_out=rule_out)
        verdict, reason = self._decide(evidence, endpoint)
        return Judgement(verdict, reason, _median(values), side.measurements, evidence=evidence)

    def _decide(self, e: SampleEvidence, endpoint: bool) -> tuple[Verdict, str]:
        g = e.vs_good
        facts = (f"p={g.p_value:.2g} (MWU {g.p_mwu:.2g}, KS {g.p_ks:.2g}), shift {g.effect:+.1%}, "
                 f"{g.n_candidate} vs {g.n_good} samples")
        if g.comparison is Comparison.DIFFERENT:
            floor = self.criterion.effect_floor(g.good_median)
            if g.shift >= floor:
                return Verdict.BAD, f"different: {facts}"
            if g.shift < floor / 2:
                return Verdict.GOOD, f"different by less than min-effect {self.criterion.min_effect}: {facts}"
            return Verdict.SKIP, f"unknown: different, but the shift is near min-effect {self.criterion.min_effect}: {facts}"
        small = g.shift < self.criterion.effect_floor(g.good_median)   # SAME also needs a shift below min-effect
        if g.comparison is Comparison.SAME and small:
            return Verdict.GOOD, f"same: {facts}, SAME above p={g.same_above:.2g}"
        if e.vs_bad is not None and e.vs_bad.comparison is Comparison.DIFFERENT and g.p_value > SAME_FLOOR and small:
            return Verdict.GOOD, f"same: the bad endpoint is worse (p={e.vs_bad.p_value:.2g}); {facts}"
        what = "the endpoints do not differ decisively" if endpoint else "unknown"
        return Verdict.SKIP, f"{what}: {facts}, SAME needs p above {g.same_above:.2g}"


def _median(values: list[float]) -> Optional[float]:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _failure(side: _Samples, criterion: Criterion, metric: str) -> Judgement:
    failed = side.failed or next((m for m in side.measurements if m.status is not Status.OK), None)
    if failed is None:
        return Judgement(Verdict.SKIP, missing_why(side.measurements, metric), None, side.measurements)
    verdict, reason = failure_verdict(failed, criterion)
    return Judgement(verdict, f"{failed.status.value}: {reason}", None, side.measurements)


def boundary_evidence(judgements: dict[int, Judgement], last_good: Optional[int],
                      first_bad: Optional[int]) -> dict[str, SampleEvidence]:
    """The samples and comparisons of the boundary candidates (stats mode; {} otherwise)."""
    out = {}
    for name, index in (("last_good", last_good), ("first_bad", first_bad)):
        j = judgements.get(index) if index is not None else None
        if j is not None and j.evidence is not None:
            out[name] = j.evidence
    return out
