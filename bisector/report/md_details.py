"""The folded parts of the markdown report, one named ``<details>`` block each: why (what moved), the
context (the upstream report, the contrast setting), the boundary's commits, the attribution's trials,
stats mode's samples, every step, the followed bisect, the probe and the criterion's full rule, the
environment in full, the bisect's own command, the notes and the log."""
from __future__ import annotations

import json
from typing import Optional

from bisector.job.commandline import shown_command
from bisector.core.result import BisectResult
from bisector.core.points import Step
from bisector.core.units import human_value
from bisector.core.verdict import Verdict
from bisector.report.common import explainer, explanation, md_code, md_escape, result_metric, story
from bisector.report.culprit_lines import proof_trials, trial_line
from bisector.report.md_inline import Block, indented, ref, table
from bisector.report.md_visible import verdict_line
from bisector.report.env_labels import LABELS, flat
from bisector.report.sides import shown
from bisector.report.samples import evidence_markdown

_NOTE_MAX = 160


def _bullets(lines: list[str]) -> list[str]:
    return [f"- {md_escape(line, line_start=True)}" for line in lines]


def why(r: BisectResult) -> list[Block]:
    """What moved between last good and first bad, by the probe's explainer."""
    sentences = explanation(shown(r))
    return [Block("Why: what moved between last good and first bad", _bullets(sentences))] if sentences else []


def context(r: BisectResult) -> list[Block]:
    """The upstream report's numbers beside ours, where the bytes live, and the contrast setting."""
    told = story(r)
    what = "the upstream report beside our numbers" if r.reference else "the job's contrast setting"
    return [Block(f"Context: {what}", _bullets(told))] if told else []


def boundary(r: BisectResult) -> list[Block]:
    """Last good and first bad with date, author and subject (commits)."""
    s = shown(r)
    sides = [(n, p) for n, p in (("last good", s.last_good), ("first bad", s.first_bad)) if p and p.subject]
    rows = [[name, ref(p), f"{p.date:%Y-%m-%d}" if p.date else "", md_escape(p.author), md_escape(p.subject)]
            for name, p in sides]
    if not rows:
        return []
    return [Block("The boundary commits", table(["", "commit", "date", "author", "subject"],
                                                ["---", "---", "---", "---", "---"], rows))]


def trials(r: BisectResult) -> list[Block]:
    """The attribution's trials that prove its verdict."""
    proof = proof_trials(r)
    lines = [f"- {trial_line(t, result_metric(r), code=md_code)}" for t in proof]
    return [Block(f"Attribution trials ({len(proof)} of {len(r.attribution.trials)})", lines)] if proof else []


def samples(r: BisectResult) -> list[Block]:
    """Stats mode: each boundary candidate's samples against the good endpoint's."""
    lines = evidence_markdown(shown(r))
    return [Block("Samples (stats mode)", lines)] if lines else []


def _note(s: Step) -> str:
    failed = s.verdict is Verdict.SKIP or (s.value is None and s.reason and s.verdict is Verdict.BAD)
    note = s.reason if failed and s.reason else ""
    if len(note) > _NOTE_MAX:
        note = note[:_NOTE_MAX - 1] + "…"
    return (md_escape(note) + (" (stored)" if s.reused else "")).strip()


def _candidate(s: Step) -> str:
    return f"`{s.candidate}`" if "`" not in s.candidate and "|" not in s.candidate else md_escape(s.candidate)


def steps_table(r: BisectResult) -> list[str]:
    """Every step: phase, candidate, date, value, verdict, repeats, seconds, note."""
    if not r.steps:
        return []
    metric = result_metric(r)
    head = ["#", "phase", "candidate", "date", *([md_escape(explainer(r).label(metric))] if metric else []),
            "verdict", "repeats", "seconds", "note"]
    align = ["---:", "---", "---", "---", *(["---:"] if metric else []), "---", "---:", "---:", "---"]
    rows = []
    for s in r.steps:
        value = [("-" if s.value is None else human_value(s.value, s.metric or metric))] if metric else []
        rows.append([str(s.seq + 1), md_escape(s.phase), _candidate(s), f"{s.date:%Y-%m-%d}" if s.date else "",
                     *value, s.verdict.value.upper(), str(s.repeats), f"{s.seconds:.1f}", _note(s)])
    return table(head, align, rows)


def steps(r: BisectResult) -> list[Block]:
    return [Block(f"Every step ({len(r.steps)})", steps_table(r))] if r.steps else []


def followed(r: BisectResult) -> list[Block]:
    """The companion's own bisect: its verdict, what moved and its steps."""
    f = r.followed
    if f is None:
        return []
    body = verdict_line(f) + _bullets(explanation(f)) + [""] + steps_table(f)
    return [Block(f"Followed bisect of {f.package} (run {f.run_id})", body)]


def _criterion(r: BisectResult) -> list[str]:
    metric = result_metric(r)
    human = human_value(r.threshold, metric) if r.threshold is not None and metric else None
    unit = f" ({md_escape(human)})" if human and human != f"{r.threshold:g}" else ""
    rule = f" — {md_escape(r.decision_rule)}" if r.decision_rule else ""
    return [f"**Criterion:** {md_code(r.criterion)}{unit}{rule}. Probes run: {r.probes_run}, "
            f"measurements reused: {r.measurements_reused}.", ""]


def probe(r: BisectResult) -> list[Block]:
    """The probe (name, version, effective arguments, fingerprints, config) and the criterion's rule."""
    p = r.probe
    body = []
    if p:
        items = [md_code(p.label) + (f" {md_code(str(p.version))}" if p.version else "")]
        items += [f"{key} {md_code(str(value))}" for key, value in (
            ("kind", p.kind), ("args", p.args), ("schema_version", p.schema_version), ("config_hash", p.config_hash),
            ("fingerprint", p.fingerprint)) if value]
        if p.timeout:
            items.append(f"timeout {p.timeout:g} s")
        body += ["**Probe:** " + " · ".join(items), ""]
        if p.kind == "script":
            body += ["The probe is a local script: attach it (or the `--repro` script) so that the run can be "
                     "reproduced.", ""]
        if p.config:
            body += Block("Probe config", [f"{k} = {json.dumps(v)}" for k, v in sorted(p.config.items())],
                          raw=True).render()
    return [Block("Probe and criterion", body + _criterion(r))]


def environment(r: BisectResult) -> list[Block]:
    """OS, env spec and base, the merged facts, and each side's packages."""
    env = flat(r.environment)
    lines = [" · ".join(f"{md_escape(LABELS.get(k, k))} {md_code(v)}" for k, v in env.items()), ""] if env else []
    s = shown(r)
    sides = [(n, p) for n, p in (("last good", s.last_good), ("first bad", s.first_bad)) if p and p.pins]
    if len(sides) == 2:
        a, b = (set(p.pins) for _, p in sides)
        lines += [f"Packages on both sides: {', '.join(md_code(str(x)) for x in sorted(a & b))}", ""]
        for name, p in sides:
            own = sorted(set(p.pins) - (a & b))
            lines += [f"Only the {name}'s: {', '.join(md_code(str(x)) for x in own)}", ""] if own else []
    elif sides:
        lines += [f"Packages of the {sides[0][0]}: {', '.join(md_code(str(x)) for x in sides[0][1].pins)}", ""]
    return [Block("Environment in full", lines)] if lines else []


def commands(r: BisectResult) -> list[Block]:
    """The bisect's own command (needs bisector) and the widening one."""
    out = []
    for text, cmd in (("The bisect:", r.command), ("Widen the range:", r.widen_command)):
        shown_cmd = shown_command(cmd)
        if shown_cmd:
            out += [f"**{text}**", ""] + indented(shown_cmd)
    return [Block("Commands (with bisector)", out)] if out else []


def notes(r: BisectResult) -> list[Block]:
    return [Block(f"Notes ({len(r.notes)})", _bullets(r.notes))] if r.notes else []


def log(r: BisectResult) -> list[Block]:
    return [Block(f"Full log ({len(r.log)} lines)", list(r.log), raw=True)] if r.log else []


def blocks(r: BisectResult, extra: Optional[list[Block]] = None) -> list[Block]:
    """Every folded block, in reading order."""
    parts = (why, context, boundary, trials, samples, steps, followed, probe, environment, commands, notes, log)
    return [b for part in parts for b in part(r)] + (extra or [])
