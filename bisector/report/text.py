"""The terminal report of a bisect and the git-bisect-style log of a stored run."""
from __future__ import annotations

from pydantic import ValidationError

from bisector.job.commandline import joined
from bisector.core.candidate import CandidateKind
from bisector.core.result import BisectResult
from bisector.core.units import human_value
from bisector.errors import UsageError
from bisector.safety.safe_text import visible
from bisector.report.culprit_lines import attributed, full_headline, headline_area
from bisector.report.common import (also_changed_sentence, commit_range_line, explanation, headline, point_label,
                                    result_metric, story)
from bisector.report.sides import repro_commands, repro_said, shown, side_environments, table_rows
from bisector.report.samples import evidence_lines
from bisector.store.storage import RunKind, RunRow, Store


def _points(result: BisectResult) -> list[str]:
    """The table's rows as aligned lines: role, candidate, value, verdict (date, author, subject, links)."""
    s = shown(result)
    metric = result_metric(s)
    rows = table_rows(result)
    width = max((len(name) for name, _ in rows), default=0)
    lines = []
    for name, p in rows:
        value = "-" if p.value is None else human_value(p.value, metric)
        boundary = p in (s.last_good, s.first_bad)
        when = f"  {p.date:%Y-%m-%d}" if p.date and p.kind is CandidateKind.COMMIT and boundary else ""
        lines.append(f"{name + ':':<{width + 1}} {point_label(p, boundary)}  {value}{when}")
        if boundary:
            lines += [f"  {x}" for x in (p.author and f"author: {p.author}", p.link, p.pr_link) if x]
    return lines


def _reproduce(result: BisectResult) -> list[str]:
    """What the attached script printed, or the commands (each on its own line, never wrapped)."""
    said = repro_said(result, str)
    if said:
        return [f"reproduce: {said}"]
    script, bisect = repro_commands(result)
    lines = ["reproduce without bisector: a standalone script, checked in fresh venvs made by its install lines:",
             f"    {script}"] if script else []
    return lines + (["reproduce the bisect:", f"    {bisect}"] if bisect else [])


def render_text(result: BisectResult, notes_shown: bool = False) -> str:
    """The terminal report: verdict, compare link, attribution and revert, the table's rows, each side's
    environment, why, the context, the criterion, caution, hints, notes (``notes_shown``: already
    printed while the run went, so not again), the followed bisect, the repro and the run."""
    s = shown(result)
    lines = [full_headline(result)]
    if s.compare_link:
        lines.append(f"compare: {s.compare_link}")
    commits = commit_range_line(s)
    if commits:
        lines.append(commits)
    lines += [*headline_area(result), *_points(result)]
    lines += [f"environment{f', {side}' if side else ''}: {line}" for side, line in side_environments(result, str, str)]
    lines += evidence_lines(s)
    lines += [f"why: {x}" for x in explanation(s)]
    told = story(result)
    lines += ["context:", *(f"  {line}" for line in told)] if told else []
    lines.append(f"criterion: {result.criterion}")
    if result.decision_rule:
        lines.append(f"rule: {result.decision_rule}")
    lines.append(f"probes run: {result.probes_run}, measurements reused from the store: {result.measurements_reused}")
    caution = also_changed_sentence(result) if not attributed(result) else None
    if caution:
        lines.append(f"caution: {caution}")
    if result.ambiguous:
        lines.append("the first bad is one of: " + ", ".join(result.ambiguous))
    if result.refine_command:
        lines += ["refine to commits with:", f"    {joined(result.refine_command)}"]
    if not notes_shown:
        lines += [f"note: {n}" for n in result.notes]
    lines += _followed(result)
    lines += _reproduce(result)
    lines.append(f"run: {result.run_id}  (bisector log {result.run_id} / bisector report {result.run_id})")
    return visible("\n".join(lines))   # subjects, authors, reasons: shown, never acting on the terminal


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


def render_output(store: Store, run: RunRow, number: int) -> str:
    """What step ``number`` (1-based, as a run prints its steps) printed: each of its measurements' kept output
    (the last lines of each stream, redacted as stored), for ``bisector log RUN --output N``."""
    steps = store.steps(run.id)
    if not 1 <= number <= len(steps):
        raise UsageError(f"run {run.id} has {len(steps)} step(s): --output takes 1 to {len(steps)}" if steps else
                         f"run {run.id} has no steps")
    step = steps[number - 1]
    lines = [f"# step {number}: {step.candidate} {step.verdict}" + (f" # {step.reason}" if step.reason else "")]
    for key in step.measurements:
        m = store.get_measurement(key)
        output = ((m.details or {}).get("output") or {}) if m else {}
        lines.append(f"## measurement {key} (repeat {m.repeat}, {m.status.value})" if m else
                     f"## measurement {key}: not in the store")
        for stream in ("stdout", "stderr"):
            kept = output.get(stream) or []
            lines += [f"### {stream} (its last {len(kept)} lines)", *map(str, kept)] if kept else [f"### {stream}: nothing"]
    return visible("\n".join(lines))


def render_log(store: Store, run: RunRow) -> str:
    """git-bisect-style log of a stored run."""
    job = run.config.get("job") or {}
    title = (f"# bisector run {run.id}: {job.get('package')} good={job.get('good')} bad={job.get('bad')}"
             if run.kind is not RunKind.DIFF else
             f"# bisector diff {run.id}: {run.config.get('package')} {run.config.get('version')}, A against B")
    lines = [title, f"# command: {joined(run.command)}", f"# status: {run.status}"]
    metric = (run.config.get("criterion") or {}).get("metric")
    for step in store.steps(run.id):
        value = "" if step.value is None else f" value={human_value(step.value, metric)}"
        reason = f" # {step.reason}" if step.reason else ""
        repeats = f" repeats={len(step.measurements)}" if len(step.measurements) != 1 else ""
        lines.append(f"{step.verdict} {step.candidate}{value}{repeats} ({step.seconds:.1f}s){reason}")
    if run.result and run.kind is RunKind.BISECT:
        try:
            lines.append(f"# {full_headline(BisectResult.model_validate(run.result))}")
        except ValidationError as exc:   # the steps above still read
            lines.append(f"# its stored result is damaged ({exc.error_count()} problem(s))")
    return visible("\n".join(lines))


