"""Companion attribution: which change between the last good and first bad environments explains the step.

The changes are the candidate itself (last good -> first bad) and every package that moved with it
(``also_changed``). A trial is a setup between the two: a candidate (last good, or first bad when the
candidate's change is applied) with each moved package pinned at its last-good or first-bad version,
built and measured like any candidate (stored, so an interrupted run resumes). The first trial is the
first bad candidate with every moved package pinned back to its last-good version: BAD means the
candidate alone explains it. Otherwise ddmin (bisector.core.ddmin) finds the smallest set of changes
that turns the last good BAD (bisection.change_search, the engine bisector diff shares): one companion (``companion``; then the first bad with only that one
pinned back is measured too: the necessity side of the proof), or only a set together
(``interaction``). A SKIP where it mattered leaves the verdict ``undecided``.
"""
from __future__ import annotations

from typing import Callable, Optional

from bisector.decide.change_search import ChangeSearch, trial_of
from bisector.decide.judge import Judgement
from bisector.core.changes import Attribution, AttributionKind, Change, ChangeKind, Trial
from bisector.core.candidate import Candidate
from bisector.core.ddmin import Subset, Trial as Outcome, single_bound, worst_bound
from bisector.core.verdict import Verdict

ABSENT = "-"   # also_changed's mark of a package missing on one side
_OUTCOME = {Verdict.BAD: Outcome.FLIPS, Verdict.GOOD: Outcome.STAYS, Verdict.SKIP: Outcome.UNRESOLVED}
_SIDE = {Verdict.BAD: "first bad", Verdict.GOOD: "last good"}

# measures ``candidate`` with these pins (name -> version) under ``label``; returns the judgement
# (recorded as a step by the caller)
JudgeSetup = Callable[[str, Candidate, dict[str, str]], Judgement]


def moved_changes(package: str, last_good: Candidate, first_bad: Candidate,
                  moved: dict[str, list[str]]) -> list[Change]:
    """The candidate's change first, then each moved package's (absent on a side: None)."""
    own = Change(kind=ChangeKind.CANDIDATE, name=package, a=last_good.short, b=first_bad.short)
    return [own] + [Change(kind=ChangeKind.PACKAGE, name=name, a=None if a == ABSENT else a,
                           b=None if b == ABSENT else b) for name, (a, b) in moved.items()]


class Attributor(ChangeSearch):
    """The change search of one attribution: a subset is the last good with those changes moved to
    the first bad (the candidate's own change: the first bad candidate), measured through ``judge_setup``."""

    def __init__(self, changes: list[Change], last_good: Candidate, first_bad: Candidate, judge_setup: JudgeSetup):
        super().__init__(changes, self._measure_setup, lambda t: _OUTCOME[t.verdict])
        self.last_good, self.first_bad, self.judge_setup = last_good, first_bad, judge_setup
        self.trials: list[Trial] = []

    def setup(self, applied: Subset) -> tuple[Candidate, dict[str, str]]:
        """The candidate and pins of the last good with the changes ``applied`` moved to the first bad."""
        candidate = self.first_bad if 0 in applied else self.last_good
        values = {c.name: (c.b if i in applied else c.a) for i, c in enumerate(self.changes) if i}
        return candidate, {name: v for name, v in values.items() if v is not None}

    def label(self, applied: Subset) -> str:
        candidate, pins = self.setup(applied)
        pinned = ", ".join(f"{name}=={v}" for name, v in pins.items())
        return f"{self.changes[0].name} {candidate.short}" + (f" + {pinned}" if pinned else "")

    def _measure_setup(self, applied: Subset) -> Trial:
        candidate, pins = self.setup(applied)
        j = self.judge_setup(self.label(applied), candidate, pins)
        trial = trial_of(len(self.trials), self.label(applied), [self.changes[i] for i in sorted(applied)], j,
                         _SIDE.get(j.verdict))
        self.trials.append(trial)
        return trial


def attribute(package: str, last_good: Candidate, first_bad: Candidate, moved: dict[str, list[str]],
              judge_setup: JudgeSetup) -> Attribution:
    """The attribution of a found step (see the module); ``moved`` is the result's ``also_changed``.

    Trials: 1 when the candidate explains it; one companion among n changes: at most
    2 + 2 * ceil(log2 n); in general at most n * n + 3 * n + 2 (``bound`` in the result)."""
    run = Attributor(moved_changes(package, last_good, first_bad, moved), last_good, first_bad, judge_setup)
    n, own = len(run.changes), frozenset({0})
    if run.test(own) is Outcome.FLIPS:
        return _verdict(run, own, AttributionKind.CANDIDATE, 1)
    minimal = run.minimal()
    if not run.proven_minimal(minimal):
        return _undecided(run, minimal, worst_bound(n) + 2)
    if len(minimal) > 1 or 0 in minimal:
        return _verdict(run, minimal, AttributionKind.INTERACTION, worst_bound(n) + 2)
    run.test(run.everything - minimal)      # the first bad with only that companion pinned back
    return _verdict(run, minimal, AttributionKind.COMPANION, single_bound(n) + 2)


def _verdict(run: Attributor, minimal: Subset, kind: AttributionKind, bound: int) -> Attribution:
    chosen = [run.changes[i] for i in sorted(minimal)]
    return Attribution(kind=kind, packages=[c.name for c in chosen], changes=run.changes, minimal=chosen,
                       trials=run.trials, proof=run.proof(minimal, run.everything - minimal),
                       reason=_reason(run, minimal, kind), bound=bound)


def _undecided(run: Attributor, minimal: Subset, bound: int) -> Attribution:
    skipped = [t for t in run.trials if t.verdict is Verdict.SKIP]
    why = skipped[0].reason if skipped else "the trials do not single out a change"
    names = ", ".join(run.changes[i].name for i in sorted(minimal))
    return Attribution(kind=AttributionKind.UNDECIDED, changes=run.changes, trials=run.trials,
                       proof=[t.seq for t in skipped], bound=bound,
                       reason=f"the step needs some of {names}, but a trial could not be judged: {why}")


def _measured(t: Optional[Trial]) -> str:
    if t is None:
        return ""
    value = f" ({t.value:.6g})" if t.value is not None else ""
    return f"{t.label} measured {t.verdict.value.upper()}{value}"


def _reason(run: Attributor, minimal: Subset, kind: AttributionKind) -> str:
    """One sentence naming the change and the trials that show it."""
    described = run.described(minimal)
    with_it = _measured(run.by_subset.get(minimal))
    if kind is AttributionKind.CANDIDATE:
        return (f"{run.changes[0].name} {run.changes[0].b} itself: the first bad with every moved package back at "
                f"its last-good version, {with_it}")
    if kind is AttributionKind.INTERACTION:
        return f"only {described} together: {with_it}; without any one of them it stays good"
    without = run.by_subset.get(frozenset(range(len(run.changes))) - minimal)
    also = ("; but the first bad without it is BAD too, so another change gives the step as well"
            if without is not None and without.verdict is Verdict.BAD else "")
    return f"{described}: the last good with only that change, {with_it}; pinned back in the first bad, " \
           f"{_measured(without)}{also}"
