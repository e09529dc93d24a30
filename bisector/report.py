"""Reports of a bisect: terminal text, git-bisect-style log, markdown for an issue, JSON for bots.

JSON report schema ``bisector.report/1`` (``bisector report --format json`` and
``<store dir>/reports/<run>.json``): one object with

* ``schema``: "bisector.report/1";
* ``headline``: the one-line verdict (plain text);
* ``explanation``: list of plain-text sentences saying which measurements moved between the
  last good and the first bad (empty when not found or nothing to compare);
* every field of :class:`bisector.result.BisectResult`: ``run_id``, ``package``, ``mode``,
  ``status`` (found / no-regression / predates-range / undecided), ``reason``, ``criterion``,
  ``decision_rule``, ``first_bad`` / ``last_good`` (ref, kind, sha, date, subject, author, pr,
  link, pr_link, value, metrics, details), ``ambiguous``, ``probes_run``,
  ``measurements_reused``, ``steps`` (seq, phase, candidate, date, verdict, metric, value,
  metrics, repeats, seconds, reason, reused), ``notes``, ``compare_link``, ``refine_command``,
  ``widen_command``, ``command``, ``probe``, ``environment``, ``log``.

Within ``/1`` fields are only ever added; renaming or removing one bumps the version.
Dates are ISO 8601, metric values raw floats in the probe's units (bytes, B/param, seconds).
"""
from __future__ import annotations

import html
import json
import re
import shlex
from pathlib import Path
from typing import Any, Optional

from .errors import UsageError
from .explain import explain_points, metric_label
from .redact import redact_text
from .result import BisectResult, Point, Step
from .store import RunRow, Store
from .units import human_value

REPORT_SCHEMA = "bisector.report/1"
_LOCAL_FLAGS = {"--store": True, "--cache-dir": True, "--json": False}   # flag -> takes a value
STACK = ("torch", "transformers", "accelerate")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_LINE_START = re.compile(r"^(\d*)([-+=#>.)])")
_REFERENCE = re.compile(r"([#@])(?=[\w-])")


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
    """``text`` as an inline code span that no backtick in it can close (not for table cells)."""
    flat = " ".join(str(text or "").split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def result_metric(result: BisectResult) -> Optional[str]:
    """The metric the criterion reads (None for exit-code and metric-free probes)."""
    metric = next((s.metric for s in result.steps if s.metric), None)
    if metric:
        return metric
    m = re.match(r"^(\S+) [<>] \S+$", result.criterion or "")
    return m[1] if m else None


def step_of(result: BisectResult, p: Optional[Point]) -> Optional[Step]:
    """The last step that judged the candidate of ``p``."""
    if p is None:
        return None
    labels = {p.ref, p.ref[:10], (p.sha or "")[:10]}
    return next((s for s in reversed(result.steps) if s.candidate in labels), None)


def move_phrase(result: BisectResult) -> str:
    """'GA cost rose from 0.370 to 1.940 B/param', or why the first bad counts as bad."""
    metric, good, bad = result_metric(result), result.last_good, result.first_bad
    if bad is not None and bad.value is not None and good is not None and good.value is not None:
        word = "rose" if bad.value > good.value else "fell" if bad.value < good.value else "stayed"
        return (f"{metric_label(metric)} {word} from {human_value(good.value, metric)} "
                f"to {human_value(bad.value, metric)}")
    step = step_of(result, bad)
    reason = (step.reason or step.verdict) if step else "verdict"
    return reason if len(reason) <= 160 else reason[:159] + "…"


def explanation(result: BisectResult) -> list[str]:
    """Which underlying measurements moved between last good and first bad (see bisector.explain)."""
    if result.status != "found":
        return []
    return explain_points(result.last_good, result.first_bad, result_metric(result))


def _label(p: Point, with_subject: bool = True) -> str:
    if p.kind != "commit":
        return p.ref
    pr = f" (#{p.pr})" if p.pr else ""
    subject = f" '{p.subject}'" if with_subject and p.subject else ""
    return f"{p.ref[:10]}{pr}{subject}"


def headline(result: BisectResult) -> str:
    """The one-line verdict (plain text)."""
    r = result
    if r.status == "found" and r.first_bad:
        last = f" (last good: {_label(r.last_good, False)})" if r.last_good else ""
        return f"{'First fixed' if r.find_fix else 'First bad'}: {r.package} {_label(r.first_bad)} — {move_phrase(r)}{last}"
    if r.status == "no-regression":
        return f"No regression in range for {r.package}: {r.reason}"
    if r.status == "predates-range":
        return f"The change predates the range for {r.package}: {r.reason}"
    return f"Undecided for {r.package}: {r.reason}"


def log_line(step: Step) -> str:
    """One git-bisect-style line: verdict, phase, candidate, value, repeats, seconds, reason."""
    value = f" value={step.value:.6g}" if step.value is not None else ""
    repeats = f" repeats={step.repeats}" if step.repeats != 1 else ""
    reason = f" # {step.reason}" if step.reason else ""
    return f"{step.verdict} {step.phase} {step.candidate}{value}{repeats} ({step.seconds:.1f}s){reason}"


def describe_rule(criterion: Any, probe: Any = None) -> str:
    """The decision rule in words, as the report states it (criterion: bisector.criterion.Criterion)."""
    c = criterion
    if probe is not None and getattr(probe, "exit_code_mode", False):
        return "probe exit code: 0 GOOD, 125 SKIP, 1-127 BAD; signals and codes above 127 SKIP"
    fails = (f"out of memory {'BAD' if c.oom_is_bad else 'SKIP'}, crash or bad output "
             f"{'BAD' if c.crash_is_bad else 'SKIP'}, timeout {'BAD' if c.timeout_is_bad else 'SKIP'}, "
             "broken environment SKIP")
    if not c.metric:
        return f"a probe that succeeds is GOOD; failures: {fails}"
    if c.repeats == 1 and c.noise == 0:
        rule = "one measurement per candidate, BAD when it is beyond the threshold, else GOOD"
    else:
        noise = f" or their median is within ±{human_value(c.noise, c.metric)} of it" if c.noise else ""
        rule = (f"{c.repeats} measurement{'s' if c.repeats > 1 else ''} per candidate, up to {c.max_repeats} "
                f"while they straddle the threshold{noise}; BAD when all are beyond the threshold, GOOD "
                "when none is, otherwise SKIP (unknown)")
    return f"{rule}; failures: {fails}"


def environment_facts(details: dict, env: dict, package: str) -> dict:
    """Python, torch, CUDA, GPU, driver (or CPU), meter and the rest of the ML stack, from the probe's
    result ``details`` (preferred) and the environment's own record ``env`` (name -> version)."""
    versions = {**{k: v for k, v in env.items() if k in ("python",) + STACK},
                **{k: v for k, v in (details.get("versions") or {}).items() if v and v != "None"}}
    device = details.get("device") or {}
    facts = {"python": versions.get("python"), "torch": versions.get("torch")}
    if device.get("type") == "cuda":
        facts.update(cuda=device.get("cuda"), gpu=device.get("name"), driver=device.get("driver"))
    elif device:
        threads = f", {device['threads']} threads" if device.get("threads") else ""
        facts["cpu"] = f"{device.get('name') or 'unknown'}{threads}"
    facts["meter"] = details.get("meter")
    own = re.sub(r"[-_.]+", "-", package).lower()
    facts.update({k: versions.get(k) for k in STACK[1:] if k != own})
    return {k: v for k, v in facts.items() if v not in (None, "")}


def merge_sides(good: dict, bad: dict) -> dict:
    """One fact per key; 'A (last good) / B (first bad)' where the two sides differ."""
    out = {}
    for key in dict.fromkeys([*good, *bad]):
        a, b = good.get(key), bad.get(key)
        out[key] = a if a == b else f"{a or '-'} (last good) / {b or '-'} (first bad)"
    return out


def reproduce_command(command: Optional[str]) -> Optional[str]:
    """The run's command without machine-local flags (--store, --cache-dir, --json), credentials redacted."""
    if not command:
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return redact_text(command)
    out, skip = [], False
    for word in words:
        flag = word.split("=", 1)[0]
        if skip:
            skip = False
        elif flag in _LOCAL_FLAGS:
            skip = _LOCAL_FLAGS[flag] and "=" not in word
        else:
            out.append(redact_text(word))
    return shlex.join(out)


def also_changed_sentence(result: BisectResult, code=lambda text: text) -> Optional[str]:
    """'accelerate 0.27.2 -> 0.28.0 also changed ...': companions that moved with the candidate."""
    if not result.also_changed:
        return None
    moved = ", ".join(f"{name} {code(a)} → {code(b)}" for name, (a, b) in result.also_changed.items())
    pins = [f"--with {name}=={a}" for name, (a, _) in result.also_changed.items() if a != "-"]
    it = "it" if len(result.also_changed) == 1 else "them"
    rerun = " ".join([reproduce_command(result.command) or "bisector run ...", *pins])
    fix = f"; to rule {it} out, rerun with {it} pinned at the last good's version: {code(rerun)}" if pins else ""
    return (f"also changed between the last good and first bad environments: {moved} (resolved as of each "
            f"candidate's date, so the step may come from {it}){fix}")


def render_text(result: BisectResult) -> str:
    lines = [headline(result), f"criterion: {result.criterion}"]
    if result.decision_rule:
        lines.append(f"rule: {result.decision_rule}")
    lines.append(f"probes run: {result.probes_run}, measurements reused from the store: {result.measurements_reused}")
    for p, name in ((result.last_good, "last good"), (result.first_bad, "first bad")):
        if p is not None:
            value = "-" if p.value is None else human_value(p.value, result_metric(result))
            lines.append(f"{name}: {_label(p)}  {value}" + (f"  {p.date:%Y-%m-%d}" if p.date else ""))
            lines += [f"  {x}" for x in (p.author and f"author: {p.author}", p.link, p.pr_link) if x]
    lines += [f"why: {s}" for s in explanation(result)]
    caution = also_changed_sentence(result)
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
    lines.append(f"run: {result.run_id}  (bisector log {result.run_id} / bisector report {result.run_id})")
    return "\n".join(lines)


def render_log(store: Store, run: RunRow) -> str:
    """git-bisect-style log of a stored run."""
    job = run.config.get("job", {})
    lines = [f"# bisector run {run.id}: {job.get('package')} good={job.get('good')} bad={job.get('bad')}",
             f"# command: {redact_text(' '.join(run.command))}", f"# status: {run.status}"]
    for step in store.steps(run.id):
        value = "" if step.value is None else f" value={step.value:.6g}"
        reason = f" # {step.reason}" if step.reason else ""
        repeats = f" repeats={len(step.measurements)}" if len(step.measurements) != 1 else ""
        lines.append(f"{step.verdict} {step.candidate}{value}{repeats} ({step.seconds:.1f}s){reason}")
    if run.result:
        lines.append(f"# {headline(BisectResult.model_validate(run.result))}")
    return "\n".join(lines)


def render_markdown(result: BisectResult) -> str:
    from .report_md import markdown
    return markdown(result)


def render_json(result: BisectResult) -> str:
    data = {"schema": REPORT_SCHEMA, "headline": headline(result), "explanation": explanation(result),
            **result.model_dump(mode="json")}
    return json.dumps(data, indent=2, ensure_ascii=False)


def render(result: BisectResult, fmt: str) -> str:
    return {"markdown": render_markdown, "json": render_json, "text": render_text}[fmt](result)


def load_result(store: Store, run_id: Optional[str]) -> BisectResult:
    run = store.get_run(run_id)
    if run is None or not run.result:
        where = f"no finished run {run_id!r}" if run_id else "no finished runs"
        raise UsageError(f"{where} in {store.path}")
    if run.kind != "bisect":
        raise UsageError(f"run {run.id} is a {run.kind} run: its report is the matrix.md written to its --out dir")
    return BisectResult.model_validate(run.result)


def write_reports(store: Store, result: BisectResult) -> Path:
    """Write markdown and JSON reports next to the store: <store dir>/reports/<run>.{md,json}."""
    out = store.path.parent / "reports"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{result.run_id}.md").write_text(render_markdown(result))
    (out / f"{result.run_id}.json").write_text(render_json(result))
    return out
