"""The first lines of a report: what the upstream report measured (the job's ``[reference]``), what we
measured at the two ends of the range, and how the job's ``[contrast]`` setting sees the same
versions. Probe-neutral; an explainer that knows its probe adds why (bisector.explain.ga_memory.setting_story).
"""
from __future__ import annotations

from typing import Callable, Optional

from bisector.core.result import BisectResult
from bisector.core.points import Point, Step
from bisector.core.units import human_value
from bisector.core.verdict import Verdict

Label = Callable[[Optional[str]], str]


def _values(label: Label, names: list[str], sides: list[dict[str, float]]) -> str:
    """'GA cost 1.896 and 1.896 B/param; fp32 GA cost 0.652 and 0.652 B/param'."""
    parts = []
    for name in names:
        shown = [human_value(side[name], name) for side in sides if name in side]
        if not shown:
            continue
        unit = shown[-1].split(" ", 1)[1] if " " in shown[-1] else ""
        numbers = [v.split(" ", 1)[0] if unit and v.endswith(unit) else v for v in shown]
        both = len(numbers) > 1 and len(set(numbers)) == 1
        text = (numbers[0] if both else " and ".join(numbers)) + (f" {unit}" if unit else "")
        parts.append(f"{label(name)} {text}{' at both' if both else ''}")
    return "; ".join(parts)


def metric_names(result: BisectResult) -> list[str]:
    """The metrics the story quotes: the reference's, then the criterion's."""
    names = list((result.reference or {}).get("values") or {})
    if result.metric and result.metric not in names:
        names.append(result.metric)
    return names


def reference_line(result: BisectResult, label: Label) -> list[str]:
    """What the upstream report measured, in its own setting."""
    ref = result.reference
    if not ref:
        return []
    how = "; ".join(x for x in (ref.get("setting"), ref.get("measured_with")) if x)
    values = _values(label, list(ref.get("values") or {}), [ref.get("values") or {}])
    return [f"The report \u201c{ref['title']}\u201d measured at {result.package} {ref['version']} ({how}): {values}."]


def step_metrics(result: BisectResult, ref: str, phases: Optional[set[str]] = None,
                 exclude: tuple[str, ...] = ("contrast",)) -> tuple[dict[str, float], Optional[Step]]:
    """The medians of the last step that judged ``ref`` (outside ``exclude`` phases)."""
    labels = {ref, ref[:10]}
    for step in reversed(result.steps):
        if step.candidate in labels and step.phase not in exclude and (phases is None or step.phase in phases):
            return step.metrics, step
    return {}, None


def ends(result: BisectResult) -> list[str]:
    """The two versions the story quotes: the contrast's ends, else last good and first bad."""
    if result.contrast and result.contrast.points:
        return [p.ref for p in result.contrast.points]
    return [p.ref for p in (result.last_good, result.first_bad) if p is not None]


def ours_line(result: BisectResult, label: Label, setting: str) -> list[str]:
    """What we measured at the two ends, in the job's setting."""
    refs = ends(result)
    sides = [step_metrics(result, r)[0] for r in refs]
    values = _values(label, metric_names(result), sides)
    if not values:
        return []
    return [f"We measured {result.package} {' and '.join(refs)} ({setting}): {values}."]


def contrast_line(result: BisectResult, label: Label) -> list[str]:
    """How the contrast setting sees the same two versions, and what the run's criterion says of it."""
    c = result.contrast
    if not c or not c.points:
        return []
    values = _values(label, metric_names(result), [p.metrics for p in c.points])
    verdicts = [step_metrics(result, p.ref, {"contrast"}, ())[1] for p in c.points]
    said = {s.verdict for s in verdicts if s is not None}
    verdict = f"; by the run's criterion that is {said.pop().value.upper()} at both" if len(said) == 1 and len(
        verdicts) > 1 else ""
    args = " ".join(c.args)
    return [f"In {c.label} ({args}) at {' and '.join(p.ref for p in c.points)}: {values}{verdict}."]


def contrast_followup(result: BisectResult) -> list[str]:
    """The command that finds where the contrast setting starts showing it, over later releases."""
    c, refs = result.contrast, ends(result)
    if not c or not refs or not contrast_hides_it(result):
        return []
    args = " ".join(f"--probe-arg={a}" for a in c.args)
    return [f"To find the release where {c.label} starts showing it: bisector run --package {result.package} "
            f"{args} --good {refs[-1]} --bad <a newer release>."]


def contrast_hides_it(result: BisectResult) -> bool:
    """The contrast setting measures GOOD at both ends where the job's setting measured BAD at one."""
    if not result.contrast:
        return False
    theirs = [step_metrics(result, p.ref, {"contrast"}, ())[1] for p in result.contrast.points]
    ours = [step_metrics(result, p.ref)[1] for p in result.contrast.points]
    return (all(s is not None and s.verdict is Verdict.GOOD for s in theirs)
            and any(s is not None and s.verdict is Verdict.BAD for s in ours))


def point_at(result: BisectResult, ref: str) -> Optional[Point]:
    """The reported point of version ``ref`` (first bad or last good), if it is one."""
    return next((p for p in (result.first_bad, result.last_good) if p is not None and p.ref == ref), None)
