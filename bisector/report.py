"""Reports of a bisect: terminal text, git-bisect-style log, markdown for an issue, JSON for bots."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Optional

from .errors import UsageError
from .result import BisectResult, Point
from .store import RunRow, Store
from .units import human_value

REPORT_SCHEMA = "bisector.report/1"
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_escape(text: Optional[str]) -> str:
    """Escape text from outside (commit subjects, author names) so it cannot break markdown or HTML:
    HTML-significant characters become entities, markdown punctuation is backslash-escaped."""
    if not text:
        return ""
    flat = " ".join(str(text).split())
    return _MD_SPECIAL.sub(r"\\\1", html.escape(flat, quote=False))


def _value(result: BisectResult, p: Optional[Point]) -> str:
    if p is None or p.value is None:
        return "-"
    return human_value(p.value, _metric(result))


def _metric(result: BisectResult) -> Optional[str]:
    return result.criterion.split()[0] if result.criterion and " " in result.criterion else None


def _label(p: Point, with_subject: bool = True) -> str:
    if p.kind != "commit":
        return f"{p.ref}"
    pr = f" (#{p.pr})" if p.pr else ""
    subject = f" '{p.subject}'" if with_subject and p.subject else ""
    return f"{p.ref[:10]}{pr}{subject}"


def headline(result: BisectResult) -> str:
    """The one-line verdict."""
    r = result
    if r.status == "found" and r.first_bad:
        move = f" — {_metric(r) or 'verdict'} went from {_value(r, r.last_good)} to {_value(r, r.first_bad)}"
        return f"First bad: {r.package} {_label(r.first_bad)} (last good: {_label(r.last_good, False)}){move}"
    if r.status == "no-regression":
        return f"No regression in range for {r.package}: {r.reason}"
    if r.status == "predates-range":
        return f"The change predates the range for {r.package}: {r.reason}"
    return f"Undecided for {r.package}: {r.reason}"


def render_text(result: BisectResult) -> str:
    lines = [headline(result), f"criterion: {result.criterion}",
             f"probes run: {result.probes_run}, measurements reused from the store: {result.measurements_reused}"]
    for p, name in ((result.last_good, "last good"), (result.first_bad, "first bad")):
        if p is not None:
            lines.append(f"{name}: {_label(p)}  {_value(result, p)}" + (f"  {p.date:%Y-%m-%d}" if p.date else ""))
            for extra in (p.author and f"  author: {p.author}", p.link and f"  {p.link}", p.pr_link and f"  {p.pr_link}"):
                if extra:
                    lines.append(extra)
    if result.ambiguous:
        lines.append("the first bad is one of: " + ", ".join(result.ambiguous))
    if result.compare_link:
        lines.append(f"compare: {result.compare_link}")
    for cmd, text in ((result.refine_command, "refine to commits with"), (result.widen_command, "widen with")):
        if cmd:
            lines.append(f"{text}: {cmd}")
    lines += [f"note: {n}" for n in result.notes]
    lines.append(f"run: {result.run_id}  (bisector log {result.run_id} / bisector report {result.run_id})")
    return "\n".join(lines)


def render_log(store: Store, run: RunRow) -> str:
    """git-bisect-style log of a stored run."""
    job = run.config.get("job", {})
    lines = [f"# bisector run {run.id}: {job.get('package')} good={job.get('good')} bad={job.get('bad')}",
             f"# command: {' '.join(run.command)}", f"# status: {run.status}"]
    for step in store.steps(run.id):
        value = "" if step.value is None else f" value={step.value:.6g}"
        reason = f" # {step.reason}" if step.reason else ""
        lines.append(f"{step.verdict} {step.candidate}{value} ({step.seconds:.1f}s){reason}")
    if run.result:
        lines.append(f"# {headline(BisectResult.model_validate(run.result))}")
    return "\n".join(lines)


def render_markdown(result: BisectResult) -> str:
    from .report_md import markdown
    return markdown(result)


def render_json(result: BisectResult) -> str:
    return json.dumps({"schema": REPORT_SCHEMA, **result.model_dump(mode="json")}, indent=2)


def render(result: BisectResult, fmt: str) -> str:
    return {"markdown": render_markdown, "json": render_json, "text": render_text}[fmt](result)


def load_result(store: Store, run_id: Optional[str]) -> BisectResult:
    run = store.get_run(run_id)
    if run is None or not run.result:
        raise UsageError(f"no finished run {run_id!r} in {store.path}" if run_id else f"no finished runs in {store.path}")
    return BisectResult.model_validate(run.result)


def write_reports(store: Store, result: BisectResult) -> Path:
    """Write markdown and JSON reports next to the store: <store dir>/reports/<run>.{md,json}."""
    out = store.path.parent / "reports"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{result.run_id}.md").write_text(render_markdown(result))
    (out / f"{result.run_id}.json").write_text(render_json(result))
    return out
