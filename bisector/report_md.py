"""Markdown report for a GitHub issue comment: verdict line, links, step table, probe, environment,
reproduce command, and the full log folded in ``<details>``."""
from __future__ import annotations

from typing import Optional

from .result import BisectResult, Point
from .units import human_value


def _esc(text: Optional[str]) -> str:
    from .report import md_escape
    return md_escape(text)


def _ref(p: Point) -> str:
    if p.kind != "commit":
        return f"`{_esc(p.ref).replace(chr(92), '')}`"
    text = f"[`{p.ref[:10]}`]({p.link})" if p.link else f"`{p.ref[:10]}`"
    if p.pr:
        text += f" ([#{p.pr}]({p.pr_link}))" if p.pr_link else f" (#{p.pr})"
    return text


def _verdict_line(r: BisectResult, metric: Optional[str]) -> str:
    if r.status == "found" and r.first_bad:
        subject = f" '{_esc(r.first_bad.subject)}'" if r.first_bad.subject else ""
        move = ""
        if r.first_bad.value is not None and r.last_good and r.last_good.value is not None:
            move = (f" — {_esc(metric)} rose from {human_value(r.last_good.value, metric)} "
                    f"to {human_value(r.first_bad.value, metric)}")
            if r.first_bad.value < r.last_good.value:
                move = move.replace("rose", "fell")
        return f"**First bad: {_esc(r.package)} {_ref(r.first_bad)}**{subject}{move}"
    labels = {"no-regression": "No regression in range", "predates-range": "The change predates the range",
              "undecided": "Undecided"}
    return f"**{labels.get(r.status, r.status)}** for {_esc(r.package)}: {_esc(r.reason)}"


def _points(r: BisectResult, metric: Optional[str]) -> list[str]:
    rows = ["| | candidate | date | author | value |", "|---|---|---|---|---|"]
    for name, p in (("last good", r.last_good), ("first bad", r.first_bad)):
        if p is None:
            continue
        value = "-" if p.value is None else human_value(p.value, metric)
        date = f"{p.date:%Y-%m-%d}" if p.date else ""
        rows.append(f"| {name} | {_ref(p)} {_esc(p.subject)} | {date} | {_esc(p.author)} | {value} |")
    if r.compare_link:
        rows.append(f"\nCompare: [{r.last_good.ref[:10]}...{r.first_bad.ref[:10]}]({r.compare_link})")
    return rows


def _steps(r: BisectResult) -> list[str]:
    rows = ["| # | phase | candidate | metric | verdict | repeats | seconds | note |",
            "|---:|---|---|---:|---|---:|---:|---|"]
    for s in r.steps:
        value = "-" if s.value is None else human_value(s.value, s.metric)
        note = _esc(s.reason if s.verdict == "skip" else ("stored" if s.reused else ""))
        rows.append(f"| {s.seq + 1} | {s.phase} | `{_esc(s.candidate)}` | {value} | {s.verdict.upper()} | "
                    f"{s.repeats} | {s.seconds:.1f} | {note} |")
    return rows


def _facts(title: str, facts: dict) -> list[str]:
    if not facts:
        return []
    items = ", ".join(f"{_esc(str(k))}: `{_esc(str(v))}`" for k, v in facts.items() if v not in (None, "", {}))
    return [f"**{title}:** {items}"]


def markdown(r: BisectResult) -> str:
    metric = r.criterion.split()[0] if " " in r.criterion else None
    out = [_verdict_line(r, metric), "", f"Criterion: `{r.criterion}` · probes run: {r.probes_run}", ""]
    if r.last_good or r.first_bad:
        out += _points(r, metric) + [""]
    if r.ambiguous:
        out += ["The first bad is one of: " + ", ".join(f"`{_esc(a)}`" for a in r.ambiguous), ""]
    out += _steps(r) + [""]
    out += _facts("Probe", r.probe) + [""] + _facts("Environment", r.environment) + [""]
    if r.command:
        out += ["Reproduce:", "", "```", r.command.replace("```", "'''"), "```", ""]
    for note in r.notes:
        out.append(f"> {_esc(note)}")
    if r.log:
        out += ["", "<details><summary>Full log</summary>", "", "```"]
        out += [line.replace("```", "'''") for line in r.log]
        out += ["```", "", "</details>"]
    return "\n".join(out).rstrip() + "\n"
