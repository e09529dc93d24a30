"""The text of an issue draft, and writing the drafts of a run into ``--issues DIR``.

A draft is a markdown file to paste upstream: the step in one title line, its state (open, or
resolved and when), what the matrix saw (kind, lines, the level before and after), one row per night
since it was found (still there? worse?), how to reproduce it, and the bisect's report when a bisect
named its first bad release (the bisect report's own markdown, from the stored bisect run)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from bisector.core.criterion import Criterion
from bisector.core.result import BisectResult
from bisector.core.units import human_value
from bisector.job.argv import run_argv
from bisector.matrix.bisects import bisect_job
from bisector.matrix.cells import exact_pins
from bisector.matrix.grid_config import MatrixConfig
from bisector.matrix.grid_result import IssueDraft, MatrixResult
from bisector.matrix.issue_drafts import worse
from bisector.report.common import md_code, md_escape
from bisector.redact import write_redacted
from bisector.report.render import render_markdown
from bisector.safety.safe_text import fenced, shell_join, visible
from bisector.store.storage import Store


def title(d: IssueDraft) -> str:
    """"accelerate 0.28.0: ga_excess_bytes_per_param 0.000 B/param → 1.244 B/param", with what the peaks behind
    a derived metric did, without their numbers (": the GA=1 peaks fell, the GA=2 peaks did not change; no
    peak rose")."""
    at = d.first_bad or d.version
    peaks = f": {re.sub(r' [(][^()]*[)]', '', d.peaks)}" if d.peaks else ""
    return (f"{d.package} {at}: {d.metric} {human_value(d.good_value, d.metric)} → "
            f"{human_value(d.bad_value, d.metric)}{peaks}")


def _state(d: IssueDraft, criterion: Criterion) -> str:
    seen = [n for n in d.nights if n.state == "present"]
    first = f"first seen {d.first_created[:10]} (run `{d.first_run}`)"
    if d.status == "resolved":
        gone = next(n for n in reversed(d.nights) if n.run_id == d.resolved_run)
        value = human_value(gone.value, d.metric) if gone.value is not None else "-"
        return (f"**Resolved** on {gone.created[:10]} (run `{gone.run_id}`): {md_escape(d.metric)} is back to "
                f"{value}, within the criterion from the level before ({human_value(d.good_value, d.metric)}); "
                f"{first}, present on {len(seen)} of {len(d.nights)} nights")
    got_worse = worse(d, criterion)
    trend = f"; **worse** since it was found: {human_value(got_worse, d.metric)}" if got_worse is not None else ""
    return f"**Open**: present on {len(seen)} of {len(d.nights)} nights, {first}{trend}"


def _nights(d: IssueDraft) -> list[str]:
    rows = ["| night | run | step | worst value on the bad side | versions there |", "|---|---|---|---:|---|"]
    for n in d.nights:
        value = human_value(n.value, d.metric) if n.value is not None else "-"
        versions = ", ".join(f"{p} {v}" for p, v in n.versions.items()) or "-"
        rows.append(f"| {n.created[:10]} | `{n.run_id}` | {n.state} | {value} | {md_escape(versions)} |")
    return rows


def _reproduce(d: IssueDraft, config: MatrixConfig) -> str:
    """The bisect of the step, with the other packages pinned as on the step's latest night (on one line
    whatever its arguments hold: a newline or a control in one is written in ``$'...'`` quoting)."""
    seen = next((n.versions for n in reversed(d.nights) if n.versions), {})
    pins = {**{p: v for p, v in seen.items() if p != d.package}, **exact_pins(config.matrix)}
    job = bisect_job(config, d.package, d.good, d.version, pins=[f"{p}=={v}" for p, v in sorted(pins.items())])
    return shell_join(run_argv(job))


def _bisect_report(store: Store, run_id: Optional[str]) -> list[str]:
    run = store.get_run(run_id) if run_id else None
    if run is None or not run.result:
        return []
    return ["", "## Bisect", "", render_markdown(BisectResult.model_validate(run.result)).rstrip()]


def text(d: IssueDraft, result: MatrixResult, config: MatrixConfig, store: Store) -> str:
    """The draft's markdown."""
    where = "cell" if d.line_is_cell else "grid line"
    lines = ", ".join(md_escape(x) or md_escape(result.packages[0]) for x in d.lines)
    found = _found(d)
    out = [f"# {md_escape(title(d))}", "",
           f"<!-- bisector issue draft {d.file}: grid {result.grid_id}, updated by run {result.run_id} -->", "",
           _state(d, config.criterion), "",
           f"Found as a {d.kind} by a nightly `bisector matrix` of {md_escape(result.packages[0])} "
           f"({md_escape(result.probe)}), on {where}s {lines}: {md_escape(d.metric)} "
           f"{human_value(d.good_value, d.metric)} at {d.package} {d.good}, {human_value(d.bad_value, d.metric)} "
           f"at {d.version}" + (f": {md_escape(d.peaks)}" if d.peaks else "")
           + f" (criterion: {md_escape(result.criterion)}).", "", found, "",
           "## Nights", "", *_nights(d), "",
           "## Reproduce", "", *_fenced_command(_reproduce(d, config))]
    return visible("\n".join(out + _bisect_report(store, d.bisect_run)).rstrip() + "\n")


def _found(d: IssueDraft) -> str:
    """Which release is the first bad one: the bisect's answer, or the index's releases between the two."""
    package = md_escape(d.package)
    if d.first_bad:
        return f"First bad: {package} {md_code(d.first_bad)} (bisect run `{d.bisect_run}`)."
    bisect = "(`bisector matrix --bisect-on-regression` runs one, as does the reproduce command below)"
    if d.releases_between == []:
        return (f"{package} {d.good} and {d.version} are adjacent releases on the package index: {d.version} is the "
                "first bad release.")
    if d.releases_between:
        n, shown = len(d.releases_between), ", ".join(d.releases_between[:3])
        more = ", ..." if n > 3 else ""
        return (f"The package index lists {n} release{'s' if n > 1 else ''} of {package} between {d.good} (good) "
                f"and {d.version} (bad) ({shown}{more}); no bisect has named the first bad one yet {bisect}.")
    return (f"Between {package} {d.good} (good) and {d.version} (bad): {d.version} is the first bad release when "
            f"no release lies between them; no bisect has checked that yet {bisect}.")


def _fenced_command(command: str) -> list[str]:
    """The command in a code block no argument can close (``$'...'`` words need bash)."""
    return fenced(command, "bash" if "$'" in command else "sh")


def write_drafts(result: MatrixResult, config: MatrixConfig, store: Store, out: Path) -> dict[str, Path]:
    """Write every draft of the run into ``out`` (the same file for the same step, night after night);
    title -> path."""
    written = {}
    if result.issue_drafts:
        out.mkdir(parents=True, exist_ok=True)
    for d in result.issue_drafts:
        path = out / d.file
        write_redacted(path, text(d, result, config, store))
        written[title(d) + (" (resolved)" if d.status == "resolved" else "")] = path
    return written
