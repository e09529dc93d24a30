"""Which change explains it: the one engine behind a bisect's companion attribution
(bisection.companion_trials) and ``bisector diff`` (difference.diff_engine).

Both measure setups between two sides: a subset of the changes applied to the starting side is one
trial (measured once per subset, kept as a typed :class:`~bisector.core.changes.Trial`), ddmin
(bisector.core.ddmin) finds the smallest set that lands on the other side, and the answer is proven
minimal only when, without each of its changes, some measured setup stayed on the starting side.
The callers say how a subset becomes a measured trial and which side a trial landed on.
"""
from __future__ import annotations

from typing import Callable, Optional

from bisector.decide.judge import Judgement
from bisector.core.changes import Change, Trial
from bisector.core.ddmin import Subset, Trial as Outcome, ddmin

# measures the setup with these changes applied (their indices) and returns it as a trial
MeasureSubset = Callable[[Subset], Trial]
# which side a measured trial landed on: STAYS (the starting side), FLIPS, or UNRESOLVED (a SKIP)
OutcomeOf = Callable[[Trial], Outcome]


def trial_of(seq: int, label: str, applied: list[Change], j: Judgement, side: Optional[str]) -> Trial:
    """A measured setup as a trial: its verdict and value, the side it landed on, its measurements (reused
    when every one was taken by an earlier run)."""
    return Trial(seq=seq, label=label, applied=[c.name for c in applied], verdict=j.verdict, value=j.value,
                 side=side, reason=j.reason, reused=bool(j.measurements) and all(m.reused for m in j.measurements),
                 measurements=[m.key for m in j.measurements])


class ChangeSearch:
    """ddmin over ``changes``, each subset measured once through ``measure`` (see the module)."""

    def __init__(self, changes: list[Change], measure: MeasureSubset, outcome: OutcomeOf):
        self.changes, self._measure, self.outcome = changes, measure, outcome
        self.by_subset: dict[Subset, Trial] = {}

    @property
    def everything(self) -> Subset:
        return frozenset(range(len(self.changes)))

    def know(self, subset: Subset, trial: Trial) -> None:
        """A subset the caller measured already (a loop's knobs applied all at once, say)."""
        self.by_subset[subset] = trial

    def test(self, subset: Subset) -> Outcome:
        """Measure the setup with ``subset`` applied (once per subset) and say where it landed."""
        if subset not in self.by_subset:
            self.by_subset[subset] = self._measure(subset)
        return self.outcome(self.by_subset[subset])

    def minimal(self) -> Subset:
        """The smallest set of changes that lands on the other side (1-minimal for a monotone test)."""
        known = {s: self.outcome(t) for s, t in self.by_subset.items()}
        return frozenset(ddmin(len(self.changes), self.test, known=known).minimal)

    def proven_minimal(self, minimal: Subset) -> bool:
        """Every change of ``minimal`` is needed: without any one of it, a measured setup stayed."""
        stays = [s for s, t in self.by_subset.items() if self.outcome(t) is Outcome.STAYS] + [frozenset()]
        return all(any(minimal - {i} <= s for s in stays) for i in minimal)

    def proof(self, minimal: Subset, *also: Subset) -> list[int]:
        """The trials that prove the answer: the minimal set applied, the setups without each of its
        changes, and the caller's ``also`` (those that were measured)."""
        wanted = [minimal, *also] + [minimal - {i} for i in minimal]
        return sorted({self.by_subset[s].seq for s in wanted if s in self.by_subset})

    def described(self, subset: Subset) -> str:
        """The changes of ``subset`` in words, joined with 'and'."""
        return " and ".join(self.changes[i].describe() for i in sorted(subset))
