"""Two samples compared the way Chromium's Pinpoint does it: DIFFERENT, SAME or UNKNOWN (pure).

The p-value is the smaller of a one-sided Mann-Whitney U and a one-sided Kolmogorov-Smirnov test
(scipy), both asking "is the candidate worse than the good endpoint, in the regression's direction"
(MWU sees a shift, KS also a change of spread or shape). DIFFERENT when that p-value is at most
``alpha``. SAME when it is above a threshold that falls as the samples grow: the p-value that a
regression of the size being looked for (``rule_out``, as a probability of superiority: how often a
bad run is worse than a good one) would stay below in 99% of samples this big. Anything between is
UNKNOWN: more repeats would decide. The size of the move is the Hodges-Lehmann shift (the median of
every pairwise difference), also relative to the good median (0 when that median is 0).
"""
from __future__ import annotations

import enum
import math
import statistics
from typing import Optional, Sequence

from pydantic import BaseModel

ALPHA = 0.01          # DIFFERENT at or below this p-value
DRIFT_P = 0.01        # the good endpoint's samples of two stretches of time differ: the machine drifted
SAME_FLOOR = 0.01     # a p-value at or below this is never SAME, however large the regression looked for
MISS = 0.01           # SAME only where a regression of the size looked for would show below the threshold 99% of the time
CONFIRM_ALPHA = 0.002  # the confirmation of a culprit replicates the search's step on fresh samples, looking after
CONFIRM_MISS = 0.002   # every pair; at 0.2% a look (both ways) a pair without a step passes 2.1% of the time and a
                       # +20% step under +-25% noise fails 0.4% (at 1% a look: 6.4% and 1.1%; bench/noisy.py); 0.1%
                       # would pass 1.2%, at 4 more probes a confirmation: 3.01x the noise-band probes when bursty


class Comparison(enum.StrEnum):
    """What two samples say about each other (string-valued: stored and reported as is)."""

    DIFFERENT = "different"
    SAME = "same"
    UNKNOWN = "unknown"


class SampleComparison(BaseModel):
    """The evidence of one comparison: both samples' sizes and medians, each test's p-value, the
    threshold SAME needed, and the shift (``shift`` in metric units, ``effect`` relative to the good
    median; both positive in the regression's direction)."""

    comparison: Comparison
    p_value: float
    p_mwu: float
    p_ks: float
    alpha: float
    same_above: float
    n_good: int
    n_candidate: int
    good_median: float
    candidate_median: float
    shift: float
    effect: float


def _phi(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2))


def _inverse_phi(p: float) -> float:
    return statistics.NormalDist().inv_cdf(p)


def hodges_lehmann(good: Sequence[float], candidate: Sequence[float]) -> float:
    """The median of every difference candidate - good: the shift estimate that goes with MWU."""
    return statistics.median(c - g for c in candidate for g in good)


def same_threshold(n_good: int, n_candidate: int, superiority: float, alpha: float = ALPHA, miss: float = MISS) -> float:
    """The p-value above which the samples are SAME: a regression whose probability of superiority over
    the good samples is ``superiority`` (0.5: none; the bad endpoint's, for a bisect) would give a
    smaller one-sided MWU p-value with probability 1 - ``miss`` (normal approximation: the statistic's
    spread under no shift is sqrt((n1 + n2 + 1) / (12 n1 n2))). It falls as the samples grow; never
    below ``alpha`` nor ``SAME_FLOOR``: samples that differ at p <= 1% are never the same."""
    if superiority <= 0.5 or n_good < 1 or n_candidate < 1:
        return 1.0
    spread = math.sqrt((n_good + n_candidate + 1) / (12 * n_good * n_candidate))
    expected_z = (superiority - 0.5) / spread
    return max(alpha, SAME_FLOOR, 1 - _phi(expected_z - _inverse_phi(1 - miss)))


def one_sided_p(good: Sequence[float], candidate: Sequence[float], increase: bool) -> tuple[float, float]:
    """(MWU, KS) p-values for "the candidate is larger" (``increase``) or "smaller" than good."""
    from scipy import stats  # imported on first use: scipy.stats costs 0.4 s at start-up, and only stats mode needs it
    if len(set(good)) == 1 and set(good) == set(candidate):
        return 1.0, 1.0  # identical constant samples (a deterministic metric): nothing to test
    mwu = stats.mannwhitneyu(candidate, good, alternative="greater" if increase else "less").pvalue
    ks = stats.ks_2samp(good, candidate, alternative="greater" if increase else "less").pvalue
    return tuple(1.0 if math.isnan(p) else float(p) for p in (mwu, ks))  # type: ignore[return-value]


def drifted(earlier: Sequence[float], now: Sequence[float], p: float = DRIFT_P) -> bool:
    """Whether the same candidate's samples moved between two stretches of time (two-sided MWU at ``p``):
    the machine drifted, so samples from the earlier stretch are no reference for the later one."""
    if len(earlier) < 2 or len(now) < 2:
        return False
    up, _ = one_sided_p(earlier, now, increase=True)
    down, _ = one_sided_p(earlier, now, increase=False)
    return 2 * min(up, down) <= p


def compare_samples(good: Sequence[float], candidate: Sequence[float], *, increase: bool = True,
                    alpha: float = ALPHA, rule_out: float = 0.5, miss: float = MISS) -> SampleComparison:
    """Compare ``candidate`` with ``good``: DIFFERENT (worse, p <= alpha), SAME (p above the threshold
    that rules out a regression of superiority ``rule_out``, missed with probability ``miss``) or UNKNOWN."""
    p_mwu, p_ks = one_sided_p(good, candidate, increase)
    p = min(p_mwu, p_ks)
    above = same_threshold(len(good), len(candidate), rule_out, alpha, miss)
    comparison = Comparison.DIFFERENT if p <= alpha else Comparison.SAME if p > above else Comparison.UNKNOWN
    sign = 1.0 if increase else -1.0
    shift = sign * hodges_lehmann(good, candidate)
    median = statistics.median(good)
    return SampleComparison(comparison=comparison, p_value=p, p_mwu=p_mwu, p_ks=p_ks, alpha=alpha, same_above=above,
                            n_good=len(good), n_candidate=len(candidate), good_median=median,
                            candidate_median=statistics.median(candidate), shift=shift,
                            effect=shift / abs(median) if median else 0.0)


def superiority(good: Sequence[float], bad: Sequence[float], increase: bool = True) -> float:
    """The probability that a bad value is worse than a good one (ties count half): MWU's effect size."""
    sign = 1.0 if increase else -1.0
    wins = sum(1.0 if sign * (b - g) > 0 else 0.5 if b == g else 0.0 for b in bad for g in good)
    return wins / (len(good) * len(bad))


def superiority_lower_bound(good: Sequence[float], bad: Sequence[float], increase: bool = True) -> float:
    """A conservative size of the endpoints' regression: their probability of superiority less 1.645 of
    its standard error (Hanley and McNeil's), the size a bisect's SAME verdicts rule out."""
    a, n1, n2 = superiority(good, bad, increase), len(good), len(bad)
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    se = math.sqrt(max(a * (1 - a) + (n2 - 1) * (q1 - a * a) + (n1 - 1) * (q2 - a * a), 0.0) / (n1 * n2))
    return a - 1.645 * se


class SampleEvidence(BaseModel):
    """What decided a candidate in stats mode: its samples, the good endpoint's samples it was compared
    with, that comparison, and (when it decided SAME) the comparison of the bad endpoint's samples with
    the candidate's; ``rule_out`` is the size of regression SAME ruled out."""

    samples: list[float]
    reference: list[float]
    vs_good: SampleComparison
    vs_bad: Optional[SampleComparison] = None
    rule_out: float = 0.5
