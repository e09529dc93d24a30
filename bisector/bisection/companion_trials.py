"""Companion attribution: which change between the last good and first bad environments explains the step.

The changes are the candidate itself (last good -> first bad) and every package that moved with it
(``also_changed``). A trial is a setup between the two: a candidate (last good, or first bad when the
candidate's change is applied) with each moved package pinned at its last-good or first-bad version,
built and measured like any candidate (stored, so an interrupted run resumes). The first trial is the
first bad candidate with every moved package pinned back to its last-good version: BAD means the
candidate alone explains it. Otherwise ddmin (bisector.core.ddmin) finds the smallest set of changes
that turns the last good BAD: one companion (``companion``; then the first bad with only that one
pinned back is measured too: the necessity side of the proof), or only a set together
(``interaction``). A SKIP where it mattered leaves the verdict ``undecided``.
"""
from __future__ import annotations

from typing import Callable, Optional

from bisector.bisection.judge import Judgement
from bisector.core.changes import Attribution, AttributionKind, Change, ChangeKind, Trial
from bisector.core.candidate import Candidate
from bisector.core.ddmin import Subset, Trial as Outcome, ddmin, single_bound, worst_bound
from bisector.core.verdict import Verdict

ABSENT = "-"   # also_changed's mark of a package missing on one side
_OUTCOME = {Verdict.BAD: Outcome.FLIPS, Verdict.GOOD: Outcome.STAYS, Verdict.SKIP: Outcome.UNRESOLVED}
_SIDE = {Verdict.BAD: "first bad", Verdict.GOOD: "last good"}

# measures ``candidate`` with these pins (name -> version) under ``label``; returns the judgement
# and the trial's measurement keys (recorded as a step by the caller)
JudgeSetup = Callable[[str, Candidate, dict[str, str]], tuple[Judgement, bool]]


def moved_changes(package: str, last_good: Candidate, first_bad: Candidate,
                  moved: dict[str, list[str]]) -> list[Change]:
    """The candidate's change first, then each moved package's (absent on a side: None)."""
    own = Change(kind=ChangeKind.CANDIDATE, name=package, a=last_good.short, b=first_bad.short)
    return [own] + [Change(kind=ChangeKind.PACKAGE, name=name, a=None if a == ABSENT else a,
                           b=None if b == ABSENT else b) for name, (a, b) in moved.items()]


class Attributor:
    """Runs the trials of one attribution through ``judge_setup`` and keeps them."""

    def __init__(self, changes: list[Change], last_good: Candidate, first_bad: Candidate, judge_setup: JudgeSetup):
        self.changes, self.last_good, self.first_bad = changes, last_good, first_bad
        self.judge_setup = judge_setup
        self.trials: list[Trial] = []
        self.by_subset: dict[Subset, Trial] = {}

    def setup(self, applied: Subset) -> tuple[Candidate, dict[str, str]]:
        """The candidate and pins of the last good with the changes ``applied`` moved to the first bad."""
        candidate = self.first_bad if 0 in applied else self.last_good
        values = {c.name: (c.b if i in applied else c.a) for i, c in enumerate(self.changes) if i}
        return candidate, {name: v for name, v in values.items() if v is not None}

    def label(self, applied: Subset) -> str:
        candidate, pins = self.setup(applied)
        pinned = ", ".join(f"{name}=={v}" for name, v in pins.items())
        return f"{self.changes[0].name} {candidate.short}" + (f" + {pinned}" if pinned else "")

    def test(self, applied: Subset) -> Outcome:
        """Measure the setup with ``applied`` moved (once per subset)."""
        if applied not in self.by_subset:
            candidate, pins = self.setup(applied)
            j, reused = self.judge_setup(self.label(applied), candidate, pins)
            trial = Trial(seq=len(self.trials), label=self.label(applied), verdict=j.verdict, value=j.value,
                          side=_SIDE.get(j.verdict), reason=j.reason, reused=reused,
                          applied=[self.changes[i].name for i in sorted(applied)],
                          measurements=[m.key for m in j.measurements])
            self.trials.append(trial)
            self.by_subset[applied] = trial
        return _OUTCOME[self.by_subset[applied].verdict]

    def proven_minimal(self, minimal: Subset) -> bool:
        """Every change of ``minimal`` is needed: without any one of it, a measured setup stayed good."""
        stays = [s for s, t in self.by_subset.items() if t.verdict is Verdict.GOOD] + [frozenset()]
        return all(any(minimal - {i} <= s for s in stays) for i in minimal)


def attribute(package: str, last_good: Candidate, first_bad: Candidate, moved: dict[str, list[str]],
              judge_setup: JudgeSetup) -> Attribution:
    """The attribution of a found step (see the module); ``moved`` is the result's ``also_changed``.

    Trials: 1 when the candidate explains it; one companion among n changes: at most
    2 + 2 * ceil(log2 n); in general at most n * n + 3 * n + 2 (``bound`` in the result)."""
    changes = moved_changes(package, last_good, first_bad, moved)
    run = Attributor(changes, last_good, first_bad, judge_setup)
    n, own = len(changes), frozenset({0})
    if run.test(own) is Outcome.FLIPS:
        return _verdict(run, own, AttributionKind.CANDIDATE, 1)
    minimal = frozenset(ddmin(n, run.test, known={own: run.test(own)}).minimal)
    if not run.proven_minimal(minimal):
        return _undecided(run, minimal, worst_bound(n) + 2)
    if len(minimal) > 1 or 0 in minimal:
        return _verdict(run, minimal, AttributionKind.INTERACTION, worst_bound(n) + 2)
    run.test(frozenset(range(n)) - minimal)      # the first bad with only that companion pinned back
    return _verdict(run, minimal, AttributionKind.COMPANION, single_bound(n) + 2)


def _proof(run: Attributor, minimal: Subset) -> list[int]:
    """The trials that prove the verdict: the minimal set applied, the first bad without it, and the
    setups without each of its changes."""
    everything = frozenset(range(len(run.changes)))
    wanted = [minimal, everything - minimal] + [minimal - {i} for i in minimal]
    return sorted({run.by_subset[s].seq for s in wanted if s in run.by_subset})


def _verdict(run: Attributor, minimal: Subset, kind: AttributionKind, bound: int) -> Attribution:
    chosen = [run.changes[i] for i in sorted(minimal)]
    return Attribution(kind=kind, packages=[c.name for c in chosen], changes=run.changes, minimal=chosen,
                       trials=run.trials, proof=_proof(run, minimal), reason=_reason(run, minimal, kind),
                       bound=bound)


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
    described = " and ".join(run.changes[i].describe() for i in sorted(minimal))
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
