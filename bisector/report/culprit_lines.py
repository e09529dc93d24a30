"""The headline area's attribution and confirmation: which change explains the step (with the trials
that prove it), the companion named as the first bad when it was followed ("through the companion"),
and whether reverting a commit culprit undoes the step. Plain text here; markdown wraps it."""
from __future__ import annotations

from typing import Callable, Optional

from bisector.core.changes import AttributionKind, Trial
from bisector.core.result import BisectResult
from bisector.core.search import Outcome
from bisector.core.units import human_value
from bisector.core.verdict import Verdict
from bisector.report.common import headline, move_phrase, point_label, result_metric

_KIND = {AttributionKind.CANDIDATE: "the candidate itself", AttributionKind.COMPANION: "a companion",
         AttributionKind.INTERACTION: "only a set of changes together", AttributionKind.UNDECIDED: "undecided"}


def through_companion(result: BisectResult) -> Optional[BisectResult]:
    """The followed companion's result when it found the first bad (what the headline names)."""
    f = result.followed
    return f if f is not None and f.status is Outcome.FOUND and f.first_bad is not None else None


def attributed(result: BisectResult) -> bool:
    """The attribution decided which change explains the step (so the caution's rerun is done)."""
    return result.attribution is not None and result.attribution.kind is not AttributionKind.UNDECIDED


def full_headline(result: BisectResult) -> str:
    """The one-line verdict: the companion's first bad "through the companion" when it was followed."""
    f = through_companion(result)
    if f is None or result.first_bad is None or result.attribution is None:
        return headline(result)
    moved = result.attribution.minimal[0].describe()
    last = f" (last good: {point_label(f.last_good, False)})" if f.last_good else ""
    return (f"First bad: {f.package} {point_label(f.first_bad)}, through the companion (bisecting {result.package} "
            f"blamed {point_label(result.first_bad, False)}, whose environment moved {moved}) — "
            f"{move_phrase(f)}{last}")


def trial_line(t: Trial, metric: Optional[str], code: Callable[[str], str] = lambda x: x) -> str:
    """'transformers 4.38.2 + accelerate==0.28.0: 1.244 B/param, BAD' (the reason when it was a SKIP)."""
    value = f"{human_value(t.value, metric)}, " if t.value is not None else ""
    why = f" ({t.reason})" if t.verdict.value == "skip" and t.reason else ""
    return f"{code(t.label)}: {value}{t.verdict.value.upper()}{why}"


def attribution_summary(result: BisectResult, code: Callable[[str], str] = lambda x: x) -> Optional[str]:
    """'companion: accelerate 0.27.2 → 0.28.0 explains the step (3 trials, bound 4)'."""
    a = result.attribution
    if a is None:
        return None
    changes = " and ".join(code(c.describe()) for c in a.minimal)
    if a.kind is AttributionKind.UNDECIDED:
        return f"undecided: {a.reason} ({len(a.trials)} trials)"
    what = {AttributionKind.CANDIDATE: f"{changes} itself explains the step, not what moved with it",
            AttributionKind.COMPANION: f"{changes} explains the step, not {result.package}",
            AttributionKind.INTERACTION: f"only {changes} together give the step"}[a.kind]
    return f"{a.kind.value}: {what} ({len(a.trials)} trial{'s' if len(a.trials) != 1 else ''}, bound {a.bound})"


def proof_trials(result: BisectResult) -> list[Trial]:
    """The trials the attribution's verdict rests on."""
    a = result.attribution
    return [t for t in a.trials if t.seq in a.proof] if a else []


def confirmation_summary(result: BisectResult, code: Callable[[str], str] = lambda x: x) -> Optional[str]:
    """'confirmed: reverting 145a98fc12 on 9e72c61296 measures 0.000 B/param (GOOD)' (what a verdict
    other than GOOD means is said once, after it)."""
    c = result.confirmation if result is not None else None
    if c is None:
        return None
    what = f"reverting {code(c.culprit[:10])} on {code(c.onto[:10])}"
    if c.conflicts:
        return f"{c.status.value}: {what} does not apply cleanly (conflicts in {', '.join(map(code, c.conflicts))})"
    if c.verdict is None:
        return f"{c.status.value}: {c.reason}"
    value = f"{human_value(c.value, result_metric(result))} " if c.value is not None else ""
    meaning = c.reason.split(": ", 1)[1] if ": " in c.reason else c.reason
    why = f": {meaning}" if c.verdict is not Verdict.GOOD else ""
    return f"{c.status.value}: {what} measures {value}({c.verdict.value.upper()}){why}"


def headline_area(result: BisectResult) -> list[str]:
    """The plain-text lines under the headline: attribution (with its proof) and confirmation."""
    metric = result_metric(result)
    lines = []
    summary = attribution_summary(result)
    if summary:
        lines.append(f"attribution: {summary}")
        lines += [f"  {trial_line(t, metric)}" for t in proof_trials(result)]
    for r, prefix in ((result, ""), (result.followed, "followed ")):
        confirmed = confirmation_summary(r) if r is not None else None
        if confirmed:
            lines.append(f"{prefix}confirmation: {confirmed}")
    return lines
