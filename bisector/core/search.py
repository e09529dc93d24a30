"""Pure search core: find the first BAD candidate in a GOOD...GOOD BAD...BAD range.

Candidates are indices ``0..n-1``: 0 is the good endpoint, n-1 the bad one. Nothing here
does I/O; a driver asks :meth:`Search.next_batch` what to measure, measures it (in
parallel, up to ``jobs`` at a time) and hands each :class:`Verdict` back with
:meth:`Search.record`. The idea follows cargo-bisect-rustc's ``least_satisfying``: keep a
known-good ``lo`` and a known-bad ``hi`` and probe points strictly between them, here
``jobs`` points per round so the bracket shrinks ``jobs + 1`` times per round.

SKIP verdicts never count as evidence. Skipped endpoints are replaced by the nearest
decidable index inward; a skipped midpoint is replaced by the nearest unknown index,
alternating sides as ``git bisect skip`` does. When skips hide the boundary the outcome is
UNDECIDED and ``ambiguous`` lists every index that may be the first bad one.

Choices for the corner cases:

* the good endpoint (or the first decidable index above skipped ones) measuring BAD is
  PREDATES_RANGE only when it is index 0; if 0..k-1 were skipped and k is BAD, the outcome
  is UNDECIDED with ``ambiguous = (0..k)`` and ``first_bad = k``, because any of them may
  be the first bad one (0 included: the range may predate itself);
* symmetrically, the bad endpoint measuring GOOD is NO_REGRESSION only when it is n-1; if
  k+1..n-1 were skipped and k is GOOD, the outcome is UNDECIDED with
  ``ambiguous = (k+1..n-1)`` and ``last_good = k``;
* every candidate skipped: UNDECIDED with ``ambiguous = (0..n-1)``;
* non-monotone evidence (a GOOD above a BAD): ``hi`` is the lowest BAD, ``lo`` the highest
  GOOD below it, and the reason says so.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from bisector.core.verdict import Verdict

GOOD, BAD, SKIP = Verdict.GOOD, Verdict.BAD, Verdict.SKIP


class Outcome(enum.StrEnum):
    """How a search ended (string-valued: it is the result's ``status``)."""

    FOUND = "found"
    NO_REGRESSION = "no-regression"
    PREDATES_RANGE = "predates-range"
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class SearchResult:
    """The answer of a finished search; indices refer to the candidate list.

    ``ambiguous`` is empty unless SKIPs hide the boundary; then it holds, sorted, every
    index that may be the first bad one. ``probed`` lists indices in the order their
    verdicts were requested. ``reason`` is one human sentence.
    """

    outcome: Outcome
    first_bad: int | None
    last_good: int | None
    ambiguous: tuple[int, ...]
    probed: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class _Plan:
    """What the evidence so far implies: a final result, or indices still wanted."""

    result: SearchResult | None = None
    wanted: tuple[int, ...] = ()
    span: int = 0  # size of the open bracket, used to rank speculative branches


class Search:
    """Incremental k-way search state machine over candidates 0..n-1 (0 = good endpoint, n-1 = bad endpoint).

    Usage: ``while not s.done: for i in s.next_batch(): s.record(i, measure(i))``.
    Record the whole batch before asking for the next one; a batch never holds an index
    already known or still pending. ``labels`` (optional, one per candidate) only make
    the ``reason`` sentence readable; indices are used otherwise.
    """

    def __init__(self, n: int, jobs: int = 1, *, labels: Sequence[str] | None = None):
        if n < 2:
            raise ValueError(f"a search needs at least 2 candidates, got {n}")
        if jobs < 1:
            raise ValueError(f"jobs must be at least 1, got {jobs}")
        if labels is not None and len(labels) != n:
            raise ValueError(f"got {len(labels)} labels for {n} candidates")
        self.n = n
        self.jobs = jobs
        self._labels = tuple(labels) if labels is not None else None
        self._verdicts: dict[int, Verdict] = {}
        self._pending: set[int] = set()
        self._probed: list[int] = []

    def next_batch(self) -> list[int]:
        """Indices to probe now (at most ``jobs``, both endpoints first); [] when done."""
        plan = self._plan(self._verdicts, busy=self._pending)
        batch = [i for i in plan.wanted if i not in self._pending]
        self._pending.update(batch)
        self._probed.extend(batch)
        return batch

    def record(self, index: int, verdict: Verdict) -> None:
        """Store a verdict; the same verdict twice is a no-op, a different one a ValueError."""
        if not isinstance(verdict, Verdict):
            raise TypeError(f"expected a Verdict, got {verdict!r}")
        if not 0 <= index < self.n:
            raise ValueError(f"index {index} is outside 0..{self.n - 1}")
        known = self._verdicts.get(index)
        if known is not None and known is not verdict:
            raise ValueError(
                f"{self._name(index)} already measured {known.value}, now {verdict.value}"
            )
        if index not in self._pending and known is None:
            self._probed.append(index)  # recorded without being asked (e.g. a cache)
        self._pending.discard(index)
        self._verdicts[index] = verdict

    def speculative(self, limit: int) -> list[int]:
        """Indices likely needed in the round after the pending batch, for prefetching.

        Each monotone outcome of the pending batch (or, if nothing is pending, of the
        batch ``next_batch`` would give) is simulated; the indices each outcome would
        probe next are interleaved, largest remaining bracket first, and those the
        all-SKIP outcome would probe come last. At most ``limit`` indices, none already
        known, pending or in that batch.
        """
        if limit <= 0 or self.done:
            return []
        batch = sorted(self._pending) or list(self._plan(self._verdicts, busy=set()).wanted)
        excluded = set(self._verdicts) | set(batch)
        branches = []
        for hyp in _monotone_outcomes(batch):
            plan = self._plan({**self._verdicts, **hyp}, busy=set())
            branches.append((plan.span, [i for i in plan.wanted if i not in excluded]))
        branches.sort(key=lambda branch: -branch[0])
        all_skipped = self._plan({**self._verdicts, **dict.fromkeys(batch, SKIP)}, busy=set())
        merged = _round_robin([wanted for _, wanted in branches], limit)
        merged += [i for i in all_skipped.wanted if i not in excluded and i not in merged]
        return merged[:limit]

    @property
    def done(self) -> bool:
        """True once the evidence decides the result."""
        return self._plan(self._verdicts, busy=set()).result is not None

    def result(self) -> SearchResult:
        """The final answer; raises RuntimeError before ``done``."""
        result = self._plan(self._verdicts, busy=set()).result
        if result is None:
            raise RuntimeError("the search is not done yet")
        return result

    # -- planning ---------------------------------------------------------------------

    def _plan(self, verdicts: Mapping[int, Verdict], busy: set[int]) -> _Plan:
        """Decide the result, or the endpoint probes still needed, or bisect."""
        n = self.n
        good_end = _walk(verdicts, 0, +1, n)
        if good_end == n:
            return self._finish(Outcome.UNDECIDED, None, None, range(n),
                                f"all {n} candidates were skipped")
        bad_end = _walk(verdicts, n - 1, -1, n)
        if verdicts.get(good_end) is BAD:
            return self._bad_at_good_end(verdicts, good_end)
        if verdicts.get(bad_end) is GOOD:
            return self._good_at_bad_end(bad_end)
        missing = [i for i in dict.fromkeys((good_end, bad_end)) if i not in verdicts]
        if missing:
            return _Plan(wanted=tuple(i for i in missing if i not in busy))
        return self._bisect(verdicts, busy)

    def _bad_at_good_end(self, verdicts: Mapping[int, Verdict], k: int) -> _Plan:
        if k == 0:
            note = _monotony_note(verdicts, 0, self._name)
            return self._finish(Outcome.PREDATES_RANGE, 0, None, (),
                                f"the good endpoint {self._name(0)} already measured bad{note}")
        skipped = _were_skipped(k, "below it")
        return self._finish(Outcome.UNDECIDED, k, None, range(k + 1),
                            f"{self._name(k)} measured bad and {skipped}, "
                            f"so the first bad one is any of {self._span(0, k)}")

    def _good_at_bad_end(self, k: int) -> _Plan:
        n = self.n
        if k == n - 1:
            return self._finish(Outcome.NO_REGRESSION, None, k, (),
                                f"the bad endpoint {self._name(k)} measured good")
        skipped = _were_skipped(n - 1 - k, "above it")
        return self._finish(Outcome.UNDECIDED, None, k, range(k + 1, n),
                            f"{self._name(k)} measured good and {skipped}, so the "
                            f"regression (if any) is in {self._span(k + 1, n - 1)}")

    def _bisect(self, verdicts: Mapping[int, Verdict], busy: set[int]) -> _Plan:
        hi = min(i for i, v in verdicts.items() if v is BAD)
        lo = max(i for i, v in verdicts.items() if v is GOOD and i < hi)
        note = _monotony_note(verdicts, hi, self._name)
        if hi == lo + 1:
            return self._finish(Outcome.FOUND, hi, lo, (),
                                f"{self._name(hi)} is the first bad candidate and "
                                f"{self._name(lo)} the last good one{note}")
        inside = range(lo + 1, hi)
        if all(i in verdicts for i in inside):
            skipped = _were_skipped(hi - lo - 1,
                                    f"between {self._name(lo)} and {self._name(hi)}")
            return self._finish(Outcome.UNDECIDED, hi, lo, range(lo + 1, hi + 1),
                                f"{skipped}, so the first bad one is any of "
                                f"{self._span(lo + 1, hi)}{note}")
        taken = set(verdicts) | busy
        return _Plan(wanted=_spread(lo, hi, self.jobs, taken), span=hi - lo)

    def _finish(self, outcome: Outcome, first_bad: int | None, last_good: int | None,
                ambiguous: Sequence[int], reason: str) -> _Plan:
        return _Plan(result=SearchResult(outcome, first_bad, last_good, tuple(ambiguous),
                                         tuple(self._probed), reason))

    def _name(self, index: int) -> str:
        return self._labels[index] if self._labels is not None else f"#{index}"

    def _span(self, first: int, last: int) -> str:
        if first == last:
            return self._name(first)
        return f"{self._name(first)}..{self._name(last)}"


def _were_skipped(count: int, where: str) -> str:
    """'the 1 candidate X was skipped' / 'all 3 candidates X were skipped'."""
    if count == 1:
        return f"the only candidate {where} was skipped"
    return f"all {count} candidates {where} were skipped"


def _walk(verdicts: Mapping[int, Verdict], start: int, step: int, n: int) -> int:
    """First index from ``start`` in direction ``step`` not known to be SKIP (n if none)."""
    i = start
    while 0 <= i < n and verdicts.get(i) is SKIP:
        i += step
    return i if 0 <= i < n else n


def _spread(lo: int, hi: int, k: int, taken: set[int]) -> tuple[int, ...]:
    """Up to k untaken indices in (lo, hi), each nearest to one of the k even split points."""
    chosen: list[int] = []
    for part in range(1, k + 1):
        ideal = lo + (part * (hi - lo)) // (k + 1)
        found = _nearest(ideal, lo, hi, taken)
        if found is None:
            break
        chosen.append(found)
        taken = taken | {found}
    return tuple(sorted(chosen))


def _nearest(ideal: int, lo: int, hi: int, taken: set[int]) -> int | None:
    """The index in (lo, hi) nearest ``ideal`` not in ``taken``: ideal, +1, -1, +2, -2..."""
    ideal = min(max(ideal, lo + 1), hi - 1)
    for distance in range(hi - lo):
        for i in (ideal + distance, ideal - distance):
            if lo < i < hi and i not in taken:
                return i
    return None


def _monotony_note(verdicts: Mapping[int, Verdict], hi: int, name: Callable[[int], str]) -> str:
    """A clause naming a GOOD above the lowest BAD ``hi``, or '' when evidence is monotone."""
    above = [i for i, v in verdicts.items() if v is GOOD and i > hi]
    if not above:
        return ""
    return (f" (evidence is not monotone: {name(max(above))} measured good although "
            f"{name(hi)} measured bad; kept the tightest consistent bracket)")


def _monotone_outcomes(batch: Sequence[int]) -> list[dict[int, Verdict]]:
    """The monotone outcomes of a sorted batch: first j GOOD, the rest BAD, j = 0..len."""
    return [{i: (GOOD if pos < j else BAD) for pos, i in enumerate(batch)}
            for j in range(len(batch) + 1)]


def _round_robin(lists: Sequence[Sequence[int]], limit: int) -> list[int]:
    """Interleave lists (first elements first), dropping repeats, up to ``limit`` items."""
    merged: dict[int, None] = {}
    depth = max((len(items) for items in lists), default=0)
    for level in range(depth):
        for items in lists:
            if level < len(items) and len(merged) < limit:
                merged.setdefault(items[level])
    return list(merged)


def least_satisfying(n: int, predicate: Callable[[int], Verdict], jobs: int = 1) -> SearchResult:
    """Convenience: drive Search with a predicate (batch members evaluated in order)."""
    search = Search(n, jobs)
    while not search.done:
        batch = search.next_batch()
        if not batch:  # cannot happen when every batch is recorded; guard against loops
            raise RuntimeError("search stalled with nothing to probe")
        for index in batch:
            search.record(index, predicate(index))
    return search.result()
