"""Where a series shifted level: E-Divisive means (Matteson and James, 2014), the method MongoDB,
DataStax Hunter and Apache Otava use for performance histories; pure (numpy).

Neither maintained package fits as a dependency (checked on Python 3.11: ``signal-processing-algorithms``
2.1.6 needs numpy < 2 and setuptools < 71 and pulls in gevent; ``apache-otava`` 0.8.0 pins numpy 2.2.0
and scipy < 1.17 and brings BigQuery, Postgres and Slack clients), so this is the algorithm itself,
small: the energy statistic of a split ``tau`` of a segment into X and Y is

    q(tau) = m n / (m + n) * (2/(m n) sum|X_i - Y_j| - sum_{i<k}|X_i - X_k| / C(m, 2) - sum_{j<k}|Y_j - Y_k| / C(n, 2))

(alpha = 1); the best split over every segment is kept when a permutation test (seeded, so the
answer is reproducible) says it is significant, and the search recurses into the pieces. Block sums
of the distance matrix come from 2-D prefix sums, so a segment's scan is O(n^2) numpy work.

Below ``MIN_POINTS`` points there is too little history; :func:`percent_steps` is the fallback:
each point against the one before it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

MIN_POINTS = 8         # E-Divisive from this many points on; fewer: percent against the previous point
MIN_SIZE = 3           # points on each side of a change
P_VALUE = 0.01         # a split is kept when at most this share of permutations does as well
PERMUTATIONS = 199


@dataclass(frozen=True)
class ChangePoint:
    """A level shift: ``index`` is the first point of the new level; the means are those of the
    segments on each side (between the neighbouring change points); ``p_value`` is the permutation
    test's (None for the percent fallback)."""

    index: int
    before: float
    after: float
    p_value: Optional[float]

    @property
    def delta(self) -> float:
        """after - before."""
        return self.after - self.before

    @property
    def relative(self) -> float:
        """(after - before) / |before| (0 when before is 0)."""
        return self.delta / abs(self.before) if self.before else 0.0


def _prefix(d: np.ndarray) -> np.ndarray:
    p = np.zeros((d.shape[0] + 1, d.shape[1] + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)
    return p


def _block(p: np.ndarray, r0: int, r1: int, c0: int, c1: int) -> float:
    return p[r1, c1] - p[r0, c1] - p[r1, c0] + p[r0, c0]


def _best_split(p: np.ndarray, start: int, end: int, min_size: int) -> tuple[Optional[int], float]:
    """The split ``tau`` of [start, end) with the largest q, and that q (None when too short)."""
    best, best_q = None, -np.inf
    for tau in range(start + min_size, end - min_size + 1):
        m, n = tau - start, end - tau
        cross = _block(p, start, tau, tau, end)
        within_x = _block(p, start, tau, start, tau) / 2
        within_y = _block(p, tau, end, tau, end) / 2
        e = 2 * cross / (m * n) - within_x / (m * (m - 1) / 2) - within_y / (n * (n - 1) / 2)
        q = m * n / (m + n) * e
        if q > best_q:
            best, best_q = tau, q
    return best, best_q


def _significance(x: np.ndarray, start: int, end: int, observed: float, rng: np.random.Generator,
                  min_size: int, permutations: int) -> float:
    """Share of random orderings of the segment whose best split does at least as well (+1 smoothing)."""
    seg = x[start:end]
    wins = 0
    for _ in range(permutations):
        s = rng.permutation(seg)
        p = _prefix(np.abs(s[:, None] - s[None, :]))
        wins += _best_split(p, 0, len(s), min_size)[1] >= observed
    return (wins + 1) / (permutations + 1)


def e_divisive(values: Sequence[float], *, p_value: float = P_VALUE, permutations: int = PERMUTATIONS,
               min_size: int = MIN_SIZE, seed: int = 0) -> list[ChangePoint]:
    """Change points of ``values`` by hierarchical E-Divisive means, oldest first."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2 * min_size:
        return []
    p = _prefix(np.abs(x[:, None] - x[None, :]))
    rng = np.random.default_rng(seed)
    cuts: dict[int, float] = {}                      # change index -> its permutation p-value
    tested: dict[tuple[int, int], tuple[Optional[int], float, float]] = {}
    while True:
        bounds = [0, *sorted(cuts), len(x)]
        candidates = []
        for start, end in zip(bounds, bounds[1:]):
            if (start, end) not in tested:
                tau, q = _best_split(p, start, end, min_size)
                sig = _significance(x, start, end, q, rng, min_size, permutations) if tau is not None else 1.0
                tested[(start, end)] = (tau, q, sig)
            tau, q, sig = tested[(start, end)]
            if tau is not None and sig <= p_value:
                candidates.append((q, tau, sig))
        if not candidates:
            return _with_means(x, cuts)
        _, tau, sig = max(candidates)
        cuts[tau] = sig


def _with_means(x: np.ndarray, p_values: dict[int, float]) -> list[ChangePoint]:
    cuts = sorted(p_values)
    bounds = [0, *cuts, len(x)]
    out = []
    for i, cut in enumerate(cuts):
        before, after = x[bounds[i]:cut], x[cut:bounds[i + 2]]
        out.append(ChangePoint(index=cut, before=float(before.mean()), after=float(after.mean()),
                               p_value=p_values.get(cut)))
    return out


def percent_steps(values: Sequence[float], relative: float) -> list[ChangePoint]:
    """The fallback for short histories: every point that moved more than ``relative`` (0.1 = 10%)
    from the one before it."""
    out = []
    for i in range(1, len(values)):
        before, after = float(values[i - 1]), float(values[i])
        moved = abs(after - before) / abs(before) if before else (1.0 if after != before else 0.0)
        if moved > relative:
            out.append(ChangePoint(index=i, before=before, after=after, p_value=None))
    return out
