"""Markdown report for a GitHub issue comment, readable in one screen: the one-line verdict, last good
and first bad with commit / PR / compare links, what moved, the criterion and decision rule, a table
of every step, the probe, the environment, the command that reproduces the run, and the full log
folded in ``<details>``.

Everything that comes from outside (subjects, authors, probe messages, metric names) is escaped
(``md_escape``) or put in code spans that cannot be closed early (``md_code``); links are only
emitted for http(s) URLs, percent-encoded; blocks of raw text (the log, the probe config) go in
``<pre>`` with HTML entities, which GitHub and Python-Markdown both show verbatim.
"""
from __future__ import annotations

import html
import json
import re
import urllib.parse
from typing import Optional

from bisector.commandline import reproduce_command
from bisector.core.candidate import CandidateKind
from bisector.core.result import BisectResult, Point, Step
from bisector.core.search import Outcome
from bisector.core.units import human_value
from bisector.core.verdict import Verdict
from bisector.report.culprit_lines import (attributed, attribution_summary, confirmation_summary, proof_trials,
                                         through_companion, trial_line)
from bisector.report.common import (also_changed_sentence, explainer, explanation, md_code, md_escape, move_phrase,
                                    result_metric, story)
from bisector.report.samples import evidence_markdown

_NOTE_MAX = 160
_ENV_LABELS = {"os": "OS", "python": "Python", "cuda": "CUDA", "gpu": "GPU", "cpu": "CPU"}
_BAD_NAME = {Outcome.PREDATES_RANGE: "good endpoint, measured bad", Outcome.UNDECIDED: "first measured bad"}
_STATUS = {Outcome.NO_REGRESSION: "No regression in range", Outcome.PREDATES_RANGE: "The change predates the range",
           Outcome.UNDECIDED: "Undecided"}


def safe_url(url: Optional[str]) -> Optional[str]:
    """An http(s) URL fit for a markdown link target (anything else: None)."""
    if not url:
        return None
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return urllib.parse.quote(url.strip(), safe="/:?#@!$&*+,;=%~-._")


def _link(text: str, url: Optional[str]) -> str:
    target = safe_url(url)
    return f"[{text}]({target})" if target else text


def _ref(p: Point) -> str:
    """`abc1234567` (#12) with commit and PR links, or the version for a release."""
    if p.kind is not CandidateKind.COMMIT:
        return md_code(p.ref)
    text = _link(md_code(p.ref[:10]), p.link)
    if p.pr:
        text += f" ({_link(f'#{p.pr}', p.pr_link)})"
    return text


def _fold(summary: str, lines: list[str]) -> list[str]:
    """A ``<details>`` block with the lines verbatim in ``<pre>``."""
    body = "\n".join(html.escape(line, quote=False) for line in lines)
    return [f"<details><summary>{html.escape(summary)}</summary>", "", f"<pre>\n{body}\n</pre>", "",
            "</details>", ""]


def _indented(command: str) -> list[str]:
    """An indented code block (copyable on GitHub, inert in every renderer)."""
    return ["    " + line for line in command.splitlines()] + [""]


def _verdict_line(r: BisectResult) -> list[str]:
    f = through_companion(r)
    if f is not None and r.first_bad and r.attribution:
        return [f"**First bad: {md_escape(f.package)} {_ref(f.first_bad)}, through the companion** (bisecting "
                f"{md_escape(r.package)} blamed {_ref(r.first_bad)}, whose environment moved "
                f"{md_escape(r.attribution.minimal[0].describe())}) — {md_escape(move_phrase(f))}", ""]
    if r.status is Outcome.FOUND and r.first_bad:
        subject = f" '{md_escape(r.first_bad.subject)}'" if r.first_bad.subject else ""
        return [f"**{'First fixed' if r.find_fix else 'First bad'}: {md_escape(r.package)} {_ref(r.first_bad)}**{subject} — "
                f"{md_escape(move_phrase(r))}", ""]
    return [f"**{_STATUS.get(r.status, md_escape(r.status))} for {md_escape(r.package)}:** {md_escape(r.reason)}", ""]


def _story(r: BisectResult) -> list[str]:
    """The seed's story under the verdict: the upstream report's numbers beside ours, and why."""
    told = story(r)
    return [*(f"- {md_escape(line)}" for line in told), ""] if told else []


def _value_cols(r: BisectResult, metric: Optional[str]) -> tuple[str, str]:
    """The metric column's header and alignment (none without a metric)."""
    return (f" {md_escape(explainer(r).label(metric))} |", "---:|") if metric else ("", "")


def _points(r: BisectResult, metric: Optional[str]) -> list[str]:
    bad_name = _BAD_NAME.get(r.status, "first bad")
    sides = [(name, p) for name, p in (("last good", r.last_good), (bad_name, r.first_bad)) if p]
    if not sides:
        return []
    head, align = _value_cols(r, metric)
    rows = [f"| | candidate | date | author |{head}", f"|---|---|---|---|{align}"]
    for name, p in sides:
        value = (" -" if p.value is None else f" {human_value(p.value, metric)}") + " |" if metric else ""
        date = f"{p.date:%Y-%m-%d}" if p.date else ""
        subject = f" {md_escape(p.subject)}" if p.subject else ""
        rows.append(f"| {name} | {_ref(p)}{subject} | {date} | {md_escape(p.author)} |{value}")
    rows.append("")
    if r.compare_link and r.last_good and r.first_bad:
        span = md_code(f"{r.last_good.ref[:10]}...{r.first_bad.ref[:10]}")
        rows += [f"Compare: {_link(span, r.compare_link)}", ""]
    return rows


def _attribution(r: BisectResult) -> list[str]:
    """The headline area: which change explains the step, with its proof, and the revert confirmation."""
    out = []
    summary = attribution_summary(r, code=md_code)
    if summary:
        out += [f"**Attribution:** {summary}.", ""]
        out += [f"- {trial_line(t, result_metric(r), code=md_code)}" for t in proof_trials(r)] + [""]
    for res, name in ((r, "Confirmation by revert"), (r.followed, "Followed bisect, confirmation by revert")):
        sentence = confirmation_summary(res, code=md_code) if res is not None else None
        if sentence:
            out += [f"**{name}:** {sentence}.", ""]
    return out


def _followed(r: BisectResult) -> list[str]:
    """The companion's own bisect: its verdict, boundary, what moved and its steps."""
    f = r.followed
    if f is None:
        return []
    metric = result_metric(f)
    out = [f"**Followed {md_escape(f.package)}** (run {md_code(f.run_id)}):", ""] + _verdict_line(f)
    return out + _points(f, metric) + _explained(f) + _steps(f, metric)


def _caution(r: BisectResult) -> list[str]:
    if attributed(r):
        return []
    sentence = also_changed_sentence(r, code=md_code)
    return [f"**Caution:** {sentence[0].upper()}{sentence[1:]}.", ""] if sentence else []


def _ambiguous(r: BisectResult) -> list[str]:
    if not r.ambiguous:
        return []
    return ["The first bad is one of: " + ", ".join(md_code(a) for a in r.ambiguous), ""]


def _explained(r: BisectResult) -> list[str]:
    sentences = explanation(r)
    if not sentences:
        return []
    return ["**What moved:**", ""] + [f"- {md_escape(s, line_start=True)}" for s in sentences] + [""]


def _criterion(r: BisectResult, metric: Optional[str]) -> list[str]:
    found = re.match(r"^\S+ [<>] (-?\d[\d.]*(?:e[+-]?\d+)?)$", r.criterion or "")
    human = human_value(float(found[1]), metric) if found and metric else None
    unit = f" ({md_escape(human)})" if human and human != found[1] else ""
    rule = f" — {md_escape(r.decision_rule)}" if r.decision_rule else ""
    return [f"**Criterion:** {md_code(r.criterion)}{unit}{rule}. Probes run: {r.probes_run}, "
            f"measurements reused: {r.measurements_reused}.", ""]


def _note(s: Step) -> str:
    failed = s.verdict is Verdict.SKIP or (s.value is None and s.reason and s.verdict is Verdict.BAD)
    note = s.reason if failed and s.reason else ""
    if len(note) > _NOTE_MAX:
        note = note[:_NOTE_MAX - 1] + "…"
    return (md_escape(note) + (" (stored)" if s.reused else "")).strip()


def _candidate(s: Step) -> str:
    return f"`{s.candidate}`" if "`" not in s.candidate and "|" not in s.candidate else md_escape(s.candidate)


def _steps(r: BisectResult, metric: Optional[str]) -> list[str]:
    if not r.steps:
        return []
    head, align = _value_cols(r, metric)
    rows = [f"| # | phase | candidate | date |{head} verdict | repeats | seconds | note |",
            f"|---:|---|---|---|{align}---|---:|---:|---|"]
    for s in r.steps:
        value = (" -" if s.value is None else f" {human_value(s.value, s.metric or metric)}") + " |" if metric else ""
        date = f"{s.date:%Y-%m-%d}" if s.date else ""
        rows.append(f"| {s.seq + 1} | {md_escape(s.phase)} | {_candidate(s)} | {date} |{value} "
                    f"{s.verdict.value.upper()} | {s.repeats} | {s.seconds:.1f} | {_note(s)} |")
    return [f"**Steps** ({len(r.steps)}):", ""] + rows + [""]


def _probe(r: BisectResult) -> list[str]:
    p = r.probe
    if not p:
        return []
    name = p.get("probe") or p.get("name")
    items = [md_code(name) + (f" {md_code(p['version'])}" if p.get("version") else "")]
    items += [f"{key} {md_code(p[key])}" for key in ("kind", "args", "config_hash", "fingerprint") if p.get(key)]
    if p.get("timeout"):
        items.append(f"timeout {p['timeout']:g} s")
    out = ["**Probe:** " + " · ".join(items), ""]
    if p.get("kind") == "script":
        out += ["The probe is a local script: attach it so that the run can be reproduced.", ""]
    if isinstance(p.get("config"), dict):
        out += _fold("Probe config", [f"{k} = {json.dumps(v)}" for k, v in sorted(p["config"].items())])
    return out


def _environment(r: BisectResult) -> list[str]:
    env = {k: v for k, v in r.environment.items() if v not in (None, "", {})}
    if not env:
        return []
    items = [f"{md_escape(_ENV_LABELS.get(k, k))} {md_code(v)}" for k, v in env.items()]
    return ["**Environment:** " + " · ".join(items), ""]


def _commands(r: BisectResult) -> list[str]:
    out = []
    command = reproduce_command(r.command)
    if command:
        out += ["**Reproduce:**", ""] + _indented(command)
    for text, cmd in (("Refine to commits:", r.refine_command), ("Widen the range:", r.widen_command)):
        if cmd:
            out += [f"**{text}**", ""] + _indented(reproduce_command(cmd) or cmd)
    return out


def markdown(r: BisectResult) -> str:
    """The whole report (ends with a newline)."""
    metric = result_metric(r)
    out = _verdict_line(r) + _attribution(r) + _story(r) + _points(r, metric) + _caution(r) + _ambiguous(r)
    out += _explained(r) + evidence_markdown(r) + _criterion(r, metric) + _steps(r, metric) + _followed(r)
    out += _probe(r) + _environment(r)
    out += _commands(r)
    for note in r.notes:
        out += [f"Note: {md_escape(note)}", ""]
    if r.log:
        out += _fold(f"Full log ({len(r.log)} lines)", r.log)
    return "\n".join(out).rstrip() + "\n"
