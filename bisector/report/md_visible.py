"""The part of the markdown report a maintainer reads before any ``<details>`` (at most 25 lines): the
verdict with its links and the compare view, one small table of the headline metric (and the metrics
that moved most) at the range's endpoints and the boundary, the attribution and the revert in one line
each, each side's environment in one line, and one reproduce line."""
from __future__ import annotations

from typing import Optional

from bisector.job.commandline import shown_command
from bisector.core.candidate import CandidateKind
from bisector.core.result import BisectResult
from bisector.core.search import Outcome
from bisector.core.units import human_value
from bisector.report.common import also_changed_sentence, explainer, md_code, md_escape, move_phrase, result_metric
from bisector.report.culprit_lines import attributed, attribution_summary, confirmation_summary, through_companion
from bisector.report.md_inline import link, ref, table
from bisector.sources.nightly import nightly_day
from bisector.report.sides import moved_most, reproduce_sentence, shown, side_environments, step_verdict, table_rows

_STATUS = {Outcome.NO_REGRESSION: "No regression in range", Outcome.PREDATES_RANGE: "The change predates the range",
           Outcome.UNDECIDED: "Undecided"}


def _compare(r: BisectResult) -> str:
    s = shown(r)
    c = s.commit_range
    if c is not None and c.older and c.newer:
        count = f" ({c.commits} commit{'s' if c.commits != 1 else ''})" if c.commits is not None else ""
        return f" · commits {link(md_code(f'{c.older[:10]}...{c.newer[:10]}'), c.link)}{count}"
    if not s.compare_link or not s.last_good or not s.first_bad:
        return ""
    return " · compare " + link(md_code(f"{s.last_good.ref[:10]}...{s.first_bad.ref[:10]}"), s.compare_link)


def verdict_line(r: BisectResult) -> list[str]:
    """The one-line verdict: the culprit with its commit, PR and compare links, and the move."""
    f = through_companion(r)
    if f is not None and r.first_bad and r.attribution:
        return [f"**First bad: {md_escape(f.package)} {ref(f.first_bad)}, through the companion** (bisecting "
                f"{md_escape(r.package)} blamed {ref(r.first_bad)}, whose environment moved "
                f"{md_escape(r.attribution.minimal[0].describe())}) — {md_escape(move_phrase(f))}{_compare(r)}", ""]
    if r.status is Outcome.FOUND and r.first_bad:
        subject = f" '{md_escape(r.first_bad.subject)}'" if r.first_bad.subject else ""
        word = "First fixed" if r.find_fix else "First bad"
        day = nightly_day(r.first_bad.ref) if r.first_bad.kind is CandidateKind.NIGHTLY else None
        subject += f" (nightly of {day})" if day else ""
        return [f"**{word}: {md_escape(r.package)} {ref(r.first_bad)}**{subject} — {md_escape(move_phrase(r))}"
                f"{_compare(r)}", ""]
    return [f"**{_STATUS.get(r.status, md_escape(r.status))} for {md_escape(r.package)}:** {md_escape(r.reason)}", ""]


def points_table(r: BisectResult) -> list[str]:
    """The headline metric (and the ones that moved most) at each row of ``table_rows``."""
    s, rows = shown(r), table_rows(r)
    if not rows:
        return []
    metric = result_metric(s)
    names = ([metric] if metric else []) + moved_most(r, metric)
    label = explainer(s).label
    head = ["", md_escape(s.package), *(md_escape(label(n)) for n in names), "verdict"]
    body = []
    for name, p in rows:
        values = [p.value if n == metric else p.metrics.get(n) for n in names]
        verdict = step_verdict(s, p)
        body.append([name, ref(p), *("-" if v is None else human_value(v, n) for v, n in zip(values, names)),
                     verdict.value.upper() if verdict else ""])
    return table(head, ["---", "---", *("---:" for _ in names), "---"], body)


def _sentence(label: str, text: Optional[str]) -> list[str]:
    return [f"**{label}:** {text[0].upper()}{text[1:]}.", ""] if text else []


def headline_lines(r: BisectResult) -> list[str]:
    """The attribution (unless the verdict already names the companion), the revert, the caution, the
    ambiguous set and the refinement: one line each."""
    out = []
    if through_companion(r) is None:
        out += _sentence("Attribution", attribution_summary(r, code=md_code))
    confirmed = confirmation_summary(shown(r), code=md_code)
    out += _sentence("Revert", confirmed)
    if not attributed(r):
        out += _sentence("Caution", also_changed_sentence(r, code=md_code))
    if r.ambiguous:
        out += ["The first bad is one of: " + ", ".join(md_code(a) for a in r.ambiguous), ""]
    if r.refine_command:
        out += [f"**Refine to commits:** {shown_command(r.refine_command, 'markdown')}", ""]
    return out


def environment_lines(r: BisectResult) -> list[str]:
    """One line per side (see ``side_environments``)."""
    sides = side_environments(r)
    if len(sides) == 1 and not sides[0][0]:
        return [f"**Environment:** {sides[0][1]}", ""]
    return ["**Environment:**", *(f"- {name}: {line}" for name, line in sides), ""] if sides else []


def reproduce_line(r: BisectResult) -> list[str]:
    return _sentence("Reproduce", reproduce_sentence(r))


def visible(r: BisectResult) -> list[str]:
    """Everything before the first ``<details>``."""
    return (verdict_line(r) + points_table(r) + headline_lines(r) + environment_lines(r) + reproduce_line(r))
