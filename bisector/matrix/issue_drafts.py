"""One draft upstream issue per step a night finds, carried from night to night.

A step is a confirmed step along the candidate's versions, a confirmed regression against the
baseline where one package moved, or an E-Divisive change point of a cell's history that goes the
regression's way. Findings are matched with the drafts of the grid's previous run by package and
metric when their version intervals (good, bad] overlap, so the same step seen on another night (or
when ``latest`` moved past it, or on another grid line) updates its draft and never opens a second.
Each night every draft says whether its step is still there: a measured cell on its lines with the
package at or past the bad version still beyond the criterion from the level before (``present``,
with the worst value), none beyond (``gone``: the draft is resolved; a step that comes back reopens
it), or no such cell measured (``not measured``)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

from packaging.version import Version

from bisector.core.criterion import Criterion, Direction
from bisector.matrix.compare import beyond
from bisector.matrix.grid_result import CellResult, DraftNight, HistoryMethod, IssueDraft, MatrixResult
from bisector.errors import BisectorError
from bisector.matrix.steps import line_name
from bisector.sources.index import Release


@dataclass
class Finding:
    """A step found tonight, before it is matched with a draft."""

    package: str
    good: str
    bad: str
    metric: str
    kind: str
    line: str
    line_is_cell: bool
    good_value: float
    bad_value: float
    peaks: Optional[str] = None


def _findings(result: MatrixResult) -> list[Finding]:
    out = [Finding(s.package, s.good, s.bad, s.metric, "step along the versions", s.line, False, s.good_value,
                   s.bad_value, s.peaks) for s in result.version_steps if s.confirmed]
    metric = result.criterion_metric
    for cell in result.confirmed:
        moved = cell.moved_packages
        good, bad = (cell.baseline.metrics.get(metric), cell.metrics.get(metric)) if metric else (None, None)
        if len(moved) == 1 and good is not None and bad is not None and not cell.oom:   # an OOM is no level
            p = moved[0]
            out.append(Finding(p, cell.baseline.versions[p], cell.versions[p], metric, "regression against the "
                               "baseline", cell.key, True, good, bad, cell.peaks))
    for line in result.history_lines:
        if line.method is not HistoryMethod.E_DIVISIVE:
            continue
        for c in line.changes:
            if c.regression:
                at = next(i for i, n in enumerate(line.nights) if n.run_id == c.run_id)
                before = line.nights[at - 1].versions if at else {}
                moved = [p for p, v in c.versions.items() if before.get(p) not in (None, v)]
                p = moved[0] if len(moved) == 1 else result.packages[0]
                out.append(Finding(p, before.get(p, c.versions[p]), c.versions[p], line.metric,
                                   "change point of the history", line.key, True, c.before, c.after))
    return out


def _overlaps(draft: IssueDraft, f: Finding) -> bool:
    if (draft.package, draft.metric) != (f.package, f.metric):
        return False
    if Version(draft.version) == Version(f.bad):
        return True   # the same bad version (also a change point with no version moved: good == bad)
    return max(Version(draft.good), Version(f.good)) < min(Version(draft.first_bad or draft.version), Version(f.bad))


def file_name(package: str, version: str, metric: str) -> str:
    """``<package>-<version>-<metric>.md`` with anything but ``[A-Za-z0-9._+-]`` replaced."""
    return re.sub(r"[^A-Za-z0-9._+-]", "_", f"{package}-{version}-{metric}") + ".md"


def _on_lines(draft: IssueDraft, cell: CellResult, packages: list[str]) -> bool:
    return (cell.key if draft.line_is_cell else line_name(cell, packages)) in draft.lines


def _tonight(draft: IssueDraft, result: MatrixResult, criterion: Criterion) -> DraftNight:
    """Whether the draft's step is still there in tonight's cells."""
    evidence = [c for c in result.cells if _on_lines(draft, c, result.packages) and draft.package in c.versions
                and Version(c.versions[draft.package]) >= Version(draft.first_bad or draft.version)
                and c.metrics.get(draft.metric) is not None]
    night = {"run_id": result.run_id, "created": result.created}
    if not evidence:
        return DraftNight(**night, state="not measured")
    pick = max if criterion.direction is Direction.INCREASE else min
    worst = pick(evidence, key=lambda c: c.metrics[draft.metric])
    there = [c for c in evidence if beyond(criterion, c.metrics[draft.metric], draft.good_value)[0]]
    return DraftNight(**night, state="present" if there else "gone", value=worst.metrics[draft.metric],
                      versions=worst.versions)


def _new_draft(f: Finding, result: MatrixResult) -> IssueDraft:
    return IssueDraft(file=file_name(f.package, f.bad, f.metric), package=f.package, good=f.good, version=f.bad,
                      metric=f.metric, kind=f.kind, lines=[f.line], line_is_cell=f.line_is_cell,
                      good_value=f.good_value, bad_value=f.bad_value, first_run=result.run_id,
                      first_created=result.created, peaks=f.peaks)


def _bisected(draft: IssueDraft, result: MatrixResult) -> dict:
    for b in result.bisects:
        if b.package == draft.package and b.first_bad and b.run_id and _overlaps(
                draft, Finding(b.package, b.good, b.bad, draft.metric, "", "", False, 0.0, 0.0)):
            return {"first_bad": b.first_bad, "bisect_run": b.run_id}
    return {}


def track(previous: list[IssueDraft], result: MatrixResult, criterion: Criterion) -> list[IssueDraft]:
    """Tonight's drafts: the previous run's, updated, and one new draft per step no draft covers."""
    drafts = [d.model_copy(deep=True) for d in previous]
    for f in _findings(result):
        found = next((d for d in drafts if _overlaps(d, f)), None)
        if found is None:
            drafts.append(_new_draft(f, result))
        else:
            if found.line_is_cell == f.line_is_cell and f.line not in found.lines:
                found.lines.append(f.line)
    out = []
    for d in drafts:
        d = d.model_copy(update=_bisected(d, result))
        night = _tonight(d, result, criterion)
        if night.state == "gone" and d.status == "open":
            d = d.model_copy(update={"status": "resolved", "resolved_run": result.run_id})
        elif night.state == "present" and d.status == "resolved":
            d = d.model_copy(update={"status": "open", "resolved_run": None})
        out.append(d.model_copy(update={"nights": [*d.nights, night]}))
    return out


def worse(draft: IssueDraft, criterion: Criterion) -> Optional[float]:
    """The latest night's value when it is beyond the criterion from the value the step was found with."""
    last = next((n for n in reversed(draft.nights) if n.value is not None and n.state == "present"), None)
    if last is None or last.value == draft.bad_value:
        return None
    return last.value if beyond(criterion, last.value, draft.bad_value)[0] else None


def with_releases_between(drafts: list[IssueDraft], releases: Callable[[str], list[Release]]) -> list[IssueDraft]:
    """Each draft no bisect has named the first bad release of, with the releases the index lists between
    its good and bad versions (none: they are adjacent, so the bad one is the first bad release);
    unchanged when the index cannot be read or does not list both ends."""
    out = []
    for d in drafts:
        try:
            listed = [] if d.first_bad else releases(d.package)
        except BisectorError:
            listed = []
        lo, hi = Version(d.good), Version(d.version)
        if not listed or lo >= hi or not {lo, hi} <= {r.parsed for r in listed}:
            out.append(d)
            continue
        between = [r.version for r in sorted(listed, key=lambda r: r.parsed) if r.usable and lo < r.parsed < hi]
        out.append(d.model_copy(update={"releases_between": between}))
    return out
