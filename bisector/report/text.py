"""The terminal report of a bisect and the git-bisect-style log of a stored run."""
from __future__ import annotations

from bisector.core.result import BisectResult
from bisector.core.units import human_value
from bisector.redact import redact_text
from bisector.report.culprit_lines import attributed, full_headline, headline_area
from bisector.report.common import also_changed_sentence, explanation, headline, point_label, result_metric, story
from bisector.report.samples import evidence_lines
from bisector.storage import RunKind, RunRow, Store


def render_text(result: BisectResult) -> str:
    """The terminal report: headline, criterion, the boundary, why, caution, hints, notes."""
    lines = [full_headline(result), *headline_area(result), *(f"  {line}" for line in story(result)),
             f"criterion: {result.criterion}"]
    if result.decision_rule:
        lines.append(f"rule: {result.decision_rule}")
    lines.append(f"probes run: {result.probes_run}, measurements reused from the store: {result.measurements_reused}")
    env = result.environment or {}
    if env.get("torch"):
        lines.append(f"torch: {env['torch']}" + (f" from {env['torch from']}" if env.get("torch from") else ""))
    for p, name in ((result.last_good, "last good"), (result.first_bad, "first bad")):
        if p is not None:
            value = "-" if p.value is None else human_value(p.value, result_metric(result))
            lines.append(f"{name}: {point_label(p)}  {value}" + (f"  {p.date:%Y-%m-%d}" if p.date else ""))
            lines += [f"  {x}" for x in (p.author and f"author: {p.author}", p.link, p.pr_link) if x]
    lines += evidence_lines(result)
    lines += [f"why: {s}" for s in explanation(result)]
    caution = also_changed_sentence(result) if not attributed(result) else None
    if caution:
        lines.append(f"caution: {caution}")
    if result.ambiguous:
        lines.append("the first bad is one of: " + ", ".join(result.ambiguous))
    if result.compare_link:
        lines.append(f"compare: {result.compare_link}")
    for cmd, text in ((result.refine_command, "refine to commits with"), (result.widen_command, "widen with")):
        if cmd:
            lines.append(f"{text}: {cmd}")
    lines += [f"note: {n}" for n in result.notes]
    lines += _followed(result)
    lines.append(f"run: {result.run_id}  (bisector log {result.run_id} / bisector report {result.run_id})")
    return "\n".join(lines)


def _followed(result: BisectResult) -> list[str]:
    """The companion's own bisect, in short: its verdict, boundary and run."""
    f = result.followed
    if f is None:
        return []
    lines = [f"followed {f.package}: {headline(f)}"]
    for p, name in ((f.last_good, "last good"), (f.first_bad, "first bad")):
        if p is not None:
            value = "-" if p.value is None else human_value(p.value, result_metric(f))
            lines.append(f"  {name}: {point_label(p)}  {value}" + (f"  {p.link}" if p.link else ""))
    lines += [f"  why: {s}" for s in explanation(f)]
    lines.append(f"  followed run: {f.run_id}  (bisector report {f.run_id})")
    return lines


def render_log(store: Store, run: RunRow) -> str:
    """git-bisect-style log of a stored run."""
    job = run.config.get("job", {})
    title = (f"# bisector run {run.id}: {job.get('package')} good={job.get('good')} bad={job.get('bad')}"
             if run.kind is not RunKind.DIFF else
             f"# bisector diff {run.id}: {run.config.get('package')} {run.config.get('version')}, A against B")
    lines = [title, f"# command: {redact_text(' '.join(run.command))}", f"# status: {run.status}"]
    for step in store.steps(run.id):
        value = "" if step.value is None else f" value={step.value:.6g}"
        reason = f" # {step.reason}" if step.reason else ""
        repeats = f" repeats={len(step.measurements)}" if len(step.measurements) != 1 else ""
        lines.append(f"{step.verdict} {step.candidate}{value}{repeats} ({step.seconds:.1f}s){reason}")
    if run.result and run.kind is RunKind.BISECT:
        lines.append(f"# {full_headline(BisectResult.model_validate(run.result))}")
    return "\n".join(lines)


