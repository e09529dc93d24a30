"""What every bisect report says the same way: the headline, the move, the explanation, the caution
about what else changed, and escaping for markdown (text, markdown and JSON build on this)."""
from __future__ import annotations

import html
import re
from typing import Optional

from bisector.job.commandline import shown_command
from bisector.safety.safe_text import code_span
from bisector.core.candidate import CandidateKind
from bisector.core.result import BisectResult
from bisector.core.points import Point, Step
from bisector.core.search import Outcome
from bisector.core.units import human_value
from bisector.explain.generic import Explainer
from bisector.explain.registry import explainer_for
from bisector.sources.nightly import nightly_day

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_LINE_START = re.compile(r"^(\d*)([-+=#>.)])")
_REFERENCE = re.compile(r"([#@])(?=[\w-])")
_CRITERION = re.compile(r"^(\S+) [<>] \S+$")


def md_escape(text: Optional[str], line_start: bool = False) -> str:
    """Escape text from outside (commit subjects, author names, probe errors) for markdown text and
    table cells: HTML-significant characters become entities, markdown punctuation is backslash-escaped,
    and ``#123`` / ``@name`` get a zero-width break so GitHub links no wrong issue and pings nobody.
    ``line_start``: the text begins a line (or a list item), so a leading '-', '#', '1.' is escaped too."""
    if not text:
        return ""
    flat = " ".join(str(text).split())
    out = _MD_SPECIAL.sub(r"\\\1", html.escape(flat, quote=False))
    out = _REFERENCE.sub(lambda m: m[1] + "&#8203;", out)
    if not line_start:
        return out
    return _LINE_START.sub(lambda m: m[1] + "\\" + m[2] if m[1] or m[2] not in ".)" else m[0], out)


def md_code(text: Optional[str]) -> str:
    """``text`` as an inline code span that no backtick in it can close (not for table cells); its whitespace
    runs as one space (bisector.safety.safe_text.code_span)."""
    return code_span(" ".join(str(text or "").split()))


def explainer(result: BisectResult) -> Explainer:
    """The explainer of the result's probe (by its schema; by its metric names for older results)."""
    sides = [p for p in (result.last_good, result.first_bad) if p is not None]
    metrics = {k: v for p in sides for k, v in p.metrics.items()}
    metric = result_metric(result)
    if metric:
        metrics.setdefault(metric, 0.0)
    details = next((p.details for p in sides if p.details), {})
    return explainer_for(result.probe.schema_version, metrics, details)


def result_metric(result: BisectResult) -> Optional[str]:
    """The metric the criterion reads (None for exit-code and metric-free probes); results stored
    before the result named it give it through their steps or their criterion."""
    if result.metric:
        return result.metric
    metric = next((s.metric for s in result.steps if s.metric), None)
    if metric:
        return metric
    m = _CRITERION.match(result.criterion or "")
    return m[1] if m else None


def step_of(result: BisectResult, p: Optional[Point]) -> Optional[Step]:
    """The last step that judged the candidate of ``p``."""
    if p is None:
        return None
    labels = {p.ref, p.ref[:10], (p.sha or "")[:10]}
    return next((s for s in reversed(result.steps) if s.candidate in labels), None)


def move_phrase(result: BisectResult) -> str:
    """'GA cost rose from 0.370 to 1.940 B/param', with what the peaks behind a derived metric did ('...: the
    bf16 GA=1 peak fell (-1.562 B/param), the bf16 GA=2 peak did not change; no peak rose'), or why the
    first bad counts as bad."""
    metric, good, bad = result_metric(result), result.last_good, result.first_bad
    if bad is not None and bad.value is not None and good is not None and good.value is not None:
        word = "rose" if bad.value > good.value else "fell" if bad.value < good.value else "stayed"
        known = explainer(result)
        behind = known.behind(good.metrics, bad.metrics, metric) if metric else None
        return (f"{known.label(metric)} {word} from {human_value(good.value, metric)} "
                f"to {human_value(bad.value, metric)}" + (f": {behind}" if behind else ""))
    step = step_of(result, bad)
    reason = (step.reason or step.verdict) if step else "verdict"
    return reason if len(reason) <= 160 else reason[:159] + "…"


def explanation(result: BisectResult) -> list[str]:
    """Which underlying measurements moved between last good and first bad (see bisector.explain)."""
    good, bad = result.last_good, result.first_bad
    if result.status is not Outcome.FOUND or good is None or bad is None:
        return []
    return explainer(result).explain(good.metrics, bad.metrics, result_metric(result), good.details, bad.details)


def story(result: BisectResult) -> list[str]:
    """The report's first lines after the verdict: what the upstream report measured (the job's
    ``[reference]``), what we measured, where the bytes live, and how the ``[contrast]`` setting sees
    the same versions and why (see bisector.explain.reference_story); empty for jobs that have neither."""
    if not result.reference and not result.contrast:
        return []
    return explainer(result).story(result)


def point_label(p: Point, with_subject: bool = True) -> str:
    """'0.22.0', '2.14.0.dev20261004+cpu (nightly of 2026-10-04)', or '145a98fc12 (#2472) 'subject'' for a commit."""
    if p.kind is CandidateKind.NIGHTLY and with_subject and nightly_day(p.ref):
        return f"{p.ref} (nightly of {nightly_day(p.ref)})"
    if p.kind is not CandidateKind.COMMIT:
        return p.ref
    pr = f" (#{p.pr})" if p.pr else ""
    subject = f" '{p.subject}'" if with_subject and p.subject else ""
    return f"{p.ref[:10]}{pr}{subject}"


def commit_range_phrase(result: BisectResult, code=lambda text: text) -> Optional[str]:
    """'commits 1a2b3c4d5e..6f7a8b9c0d (3 commits): <compare link>': what lies between the two nightlies."""
    c = result.commit_range
    if c is None or not c.older or not c.newer:
        return None
    count = f" ({c.commits} commit{'s' if c.commits != 1 else ''})" if c.commits is not None else ""
    return f"commits {code(f'{c.older[:10]}..{c.newer[:10]}')}{count}" + (f": {c.link}" if c.link else "")


def commit_range_line(result: BisectResult) -> Optional[str]:
    """'commits: 3 between 1a2b3c4d5e and 6f7a8b9c0d (git rev-list --count in the --repo clone); nightlies from
    <index>', or why the count (or the range) is missing."""
    c = result.commit_range
    if c is None:
        return None
    where = f"; nightlies from {c.index_url}" if c.index_url else ""
    if not c.older or not c.newer:
        return f"commits: unknown ({c.why_no_count}){where}"
    span = f"{c.older[:10]} and {c.newer[:10]}"
    if c.commits is None:
        return f"commits: not counted between {span} ({c.why_no_count}){where}"
    return f"commits: {c.commits} between {span} (git rev-list --count in the --repo clone){where}"


def headline(result: BisectResult) -> str:
    """The one-line verdict (plain text)."""
    r = result
    if r.status is Outcome.FOUND and r.first_bad:
        last = f" (last good: {point_label(r.last_good, False)})" if r.last_good else ""
        commits = commit_range_phrase(r)
        return (f"{'First fixed' if r.find_fix else 'First bad'}: {r.package} {point_label(r.first_bad)} — "
                f"{move_phrase(r)}{last}" + (f"; {commits}" if commits else ""))
    if r.status is Outcome.NO_REGRESSION:
        return f"No regression in range for {r.package}: {r.reason}"
    if r.status is Outcome.PREDATES_RANGE:
        return f"The change predates the range for {r.package}: {r.reason}"
    return f"Undecided for {r.package}: {r.reason}"


def also_changed_sentence(result: BisectResult, code=lambda text: text) -> Optional[str]:
    """'accelerate 0.27.2 -> 0.28.0 also changed ...': companions that moved with the candidate."""
    if not result.also_changed:
        return None
    moved = ", ".join(f"{name} {code(a)} → {code(b)}" for name, (a, b) in result.also_changed.items())
    pins = [f"--with {name}=={a}" for name, (a, _) in result.also_changed.items() if a != "-"]
    it = "it" if len(result.also_changed) == 1 else "them"
    rerun = " ".join([shown_command(result.command) or "bisector run ...", *pins])
    fix = f"; to rule {it} out, rerun with {it} pinned at the last good's version: {code(rerun)}" if pins else ""
    return (f"also changed between the last good and first bad environments: {moved} (resolved as of each "
            f"candidate's date, so the step may come from {it}){fix}")
