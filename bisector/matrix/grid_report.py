"""Reports of a matrix run: a markdown table, a JSON file and one PNG plot per metric."""
from __future__ import annotations

import importlib.util
import io
import json
import re
from pathlib import Path
from typing import Optional

from packaging.version import Version

from bisector.core.measurement import Status
from bisector.core.units import human_value
from bisector.matrix.grid_result import CellResult, CellVerdict, MatrixResult
from bisector.matrix import report_cells
from bisector.matrix.report_trend import findings, markdown_sections, text_lines
from bisector.redact import write_redacted
from bisector.safety.safe_write import write_atomic
from bisector.report.common import md_escape
from bisector.safety.safe_text import visible

MARKDOWN_FILE, JSON_FILE = "matrix.md", "matrix.json"


def plot_file(metric: str) -> str:
    """The PNG file name of a metric's plot."""
    return "plot-" + re.sub(r"[^A-Za-z0-9._-]", "_", metric) + ".png"


def headline(result: MatrixResult) -> str:
    """One line: what the run found."""
    if result.exit_code == 3:
        return "Nothing could be measured"
    confirmed, found = len(result.confirmed), len(result.regressions)
    more = findings(result) + report_cells.lost_words(result)
    if confirmed:
        return ", ".join([f"{confirmed} confirmed regression" + ("s" if confirmed > 1 else ""), *more])
    if more:
        first = "" if result.baseline_run else " (the first run of its grid)"
        return ", ".join(more)[0].upper() + ", ".join(more)[1:] + first
    if found:
        return f"No confirmed regression ({found} not confirmed on re-measurement)"
    known = _known(result)
    if known and result.baseline_run:   # a step found on an earlier night is still there: not "no regression"
        return f"No new regression; {known}"
    return "No regression" if result.baseline_run else "No baseline yet: this run is the first of its grid"


def _known(result: MatrixResult) -> str:
    """'1 known step along the accelerate versions, still there', from earlier nights ('' when none)."""
    steps = [s for s in result.version_steps if s.confirmed and not s.new]
    changes = [c for line in result.history_lines for c in line.changes if c.regression and not c.new]
    parts = []
    if steps:
        parts.append(f"{len(steps)} known step{'s' if len(steps) > 1 else ''} along the {result.packages[0]} "
                     "versions, still there")
    if changes:
        parts.append(f"{len(changes)} known change point{'s' if len(changes) > 1 else ''} in the history")
    return ", ".join(parts)


def _code(text: str) -> str:
    """Text for inside a code span (where backslash escapes would show)."""
    return " ".join(str(text).replace("`", "'").split())


def _version_cell(cell: CellResult, package: str, label: str) -> str:
    version = cell.versions[package]
    old = cell.baseline.versions.get(package) if cell.baseline else None
    # versions and labels are the index's (data, escaped); the arrow is ours
    text = f"{md_escape(old)} -> {md_escape(version)}" if old and old != version else md_escape(version)
    return f"{text} ({md_escape(label)})" if label != version else text


def _value(value: Optional[float], metric: str) -> str:
    return "-" if value is None else human_value(value, metric)


def _metric_cell(cell: CellResult, metric: str, criterion_metric: Optional[str]) -> str:
    value = cell.metrics.get(metric)
    if value is None:
        return "OOM" if cell.oom else "-" if cell.status is Status.OK else md_escape(cell.status)
    old = cell.baseline.metrics.get(metric) if cell.baseline else None
    text = _value(value, metric)
    if old is not None and _value(old, metric) != text:
        text = f"{_value(old, metric)} -> {text}"
    text += " (OOM)" if cell.oom else ""
    return f"**{text}**" if cell.verdict is CellVerdict.REGRESSION and metric == criterion_metric else text


def _verdict_cell(cell: CellResult, metric: Optional[str]) -> str:
    if cell.verdict is CellVerdict.REGRESSION:
        limit = f"beyond {_value(cell.threshold, metric or '')}" if cell.threshold is not None else md_escape(
            cell.reason or cell.status)
        again = f", re-measured {_value(cell.confirm_value, metric or '')}" if cell.confirm_value is not None else ""
        peaks = f"; {md_escape(cell.peaks)}" if cell.peaks else ""
        if cell.confirmed:
            return f"**REGRESSION** ({limit}{again}, confirmed{peaks})"
        return f"regression? ({limit}{again}, not confirmed{peaks})"
    reason = f": {md_escape(cell.reason)}" if cell.reason else ""
    if cell.verdict is CellVerdict.LOST:
        return f"**LOST**: {md_escape(cell.status)}{reason}"
    if cell.verdict is CellVerdict.FAILED:
        return f"failed (at the baseline too): {md_escape(cell.status)}{reason}"
    return f"{cell.verdict}{reason}" if cell.reason else cell.verdict


def table(result: MatrixResult) -> list[str]:
    """Rows: cells; columns: grid packages, metrics, verdict. Moved values read ``old -> new``."""
    metric = result.criterion_metric
    head = [*result.packages, *result.metrics, "verdict"]
    rows = ["| " + " | ".join(md_escape(h) for h in head) + " |",
            "|" + "---|" * len(result.packages) + "---:|" * len(result.metrics) + "---|"]
    for cell in result.cells:
        items = [_version_cell(cell, p, lbl) for p, lbl in zip(result.packages, cell.labels)]
        items += [_metric_cell(cell, m, metric) for m in result.metrics]
        rows.append("| " + " | ".join([*items, _verdict_cell(cell, metric)]) + " |")
    return rows


def _facts(result: MatrixResult) -> list[str]:
    grid = "; ".join(f"{p} = {', '.join(e)}" + (" (candidate)" if i == 0 else "")
                     for i, (p, e) in enumerate(result.grid.items()))
    pins = ", ".join(f"{p} {v}" for p, v in result.pins.items()) or "none"
    if result.baseline_run:
        base = f"run `{result.baseline_run}` ({result.baseline_created[:19]}Z)"
    else:
        base = "none (first run of this grid)"
    return [f"- Grid: {md_escape(grid)} · pins: {md_escape(pins)} · excluded cells: {result.excluded} · "
            f"{report_cells.counts(result)}",
            f"- Probe: `{_code(result.probe)}` · criterion: {md_escape(result.criterion)}",
            f"- Baseline: {base} · earlier runs of this grid: {result.history}",
            f"- Probes run: {result.probes_run} · measurements reused: {result.measurements_reused}"]


def _drafts_section(result: MatrixResult, issues: Optional[str]) -> list[str]:
    """'## Issue drafts': each draft, linked when ``issues`` (the drafts' folder, relative to the report)
    is known."""
    if not result.issue_drafts:
        return []
    out = ["", f"## Issue drafts ({len(result.issue_drafts)})", ""]
    for d in result.issue_drafts:
        seen = sum(n.state == "present" for n in d.nights)
        name = f"[{md_escape(d.file)}]({issues}/{d.file})" if issues else f"`{d.file}`"
        out.append(f"- {name}: {md_escape(d.package)} {md_escape(d.first_bad or d.version)}, {md_escape(d.metric)}; "
                   f"{d.status}, present on {seen} of {len(d.nights)} nights")
    return out


def markdown(result: MatrixResult, plots: dict[str, str], issues: Optional[str] = None) -> str:
    """The whole markdown report: verdict, facts, the table, plot links, what was not measured, steps,
    history, issue drafts, notes and bisect reports."""
    out = [f"# Version matrix: {md_escape(result.packages[0])}", "",
           f"**{headline(result)}** · run `{result.run_id}` · {result.created[:19]}Z", ""]
    out += _facts(result) + [""] + table(result) + [""]
    for metric, name in plots.items():
        out.append(f"![{md_escape(metric)} over versions]({name})")
    out += report_cells.markdown_sections(result) + markdown_sections(result) + _drafts_section(result, issues)
    out += [""] + [f"> {md_escape(note)}" for note in result.notes]
    for b in result.bisects:
        link = f" ([report]({b.report_file}))" if b.report_file else ""
        out += ["", f"## Bisect: {md_escape(b.package)} {b.good} -> {b.bad}{link}", "", b.markdown.rstrip()]
    return visible("\n".join(out).rstrip() + "\n")   # cell reasons quote probes: nothing acting in them


def _series(result: MatrixResult, metric: str, baseline: bool) -> dict[str, dict[str, float]]:
    """Per combination of the non-candidate packages: candidate version -> value."""
    cand, others = result.packages[0], result.packages[1:]
    lines: dict[str, dict[str, float]] = {}
    for cell in result.cells:
        source = cell.baseline if baseline else cell
        if source is None or source.metrics.get(metric) is None or cand not in source.versions:
            continue
        name = ", ".join(f"{p}=={cell.versions[p]}" for p in others) or cand
        lines.setdefault(name, {})[source.versions[cand]] = source.metrics[metric]
    return lines


def plot(result: MatrixResult, metric: str, path: Path) -> None:
    """A PNG of the metric over the candidate's versions: a step line per companion combination (a
    release holds its value until the next; nothing suggests values between releases), the baseline
    dashed, confirmed regressions marked."""
    # imported here: matplotlib is optional and heavy (write_plots skips plots without it); Agg canvas,
    # no pyplot state
    from matplotlib.figure import Figure

    now, before = _series(result, metric, False), _series(result, metric, True)
    xs = sorted({v for line in (*now.values(), *before.values()) for v in line}, key=Version)
    fig = Figure(figsize=(8, 4.5), dpi=100)
    ax = fig.subplots()
    for name, line in now.items():
        drawn = ax.plot([xs.index(v) for v in sorted(line, key=Version)], [line[v] for v in sorted(line, key=Version)],
                        marker="o", drawstyle="steps-post", label=name)  # steps: no values between releases
        if name in before:
            old = before[name]
            ax.plot([xs.index(v) for v in sorted(old, key=Version)], [old[v] for v in sorted(old, key=Version)],
                    linestyle="--", marker=".", drawstyle="steps-post", color=drawn[0].get_color(),
                    label=f"{name} (baseline)")
    bad = [c for c in result.confirmed if c.metrics.get(metric) is not None]
    if bad:
        ax.scatter([xs.index(c.versions[result.packages[0]]) for c in bad], [c.metrics[metric] for c in bad],
                   s=120, facecolors="none", edgecolors="red", label="confirmed regression", zorder=3)
    ax.set_xticks(range(len(xs)), xs, rotation=30)
    ax.set_xlabel(result.packages[0])
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} over {result.packages[0]} versions")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png")
    write_atomic(path, png.getvalue())   # never through a link planted at the plot's name


def write_plots(result: MatrixResult, out: Path) -> dict[str, str]:
    """One PNG per metric (metric -> file name); none, with a note, when matplotlib is missing."""
    if importlib.util.find_spec("matplotlib") is None:
        result.notes.append("matplotlib is not installed: no plots were drawn")
        return {}
    done = {}
    for metric in result.metrics:
        if _series(result, metric, False):
            plot(result, metric, out / plot_file(metric))
            done[metric] = plot_file(metric)
    return done


def json_data(result: MatrixResult, plots: dict[str, str]) -> dict:
    """What ``matrix.json`` holds: the stored result and the counts a CI step reads."""
    return {**result.model_dump(mode="json"), "exit_code": result.exit_code, "regressions": len(result.regressions),
            "confirmed_regressions": len(result.confirmed), "cells_lost": len(result.lost), "plots": plots}


def _relative(folder: Optional[Path], out: Path) -> Optional[str]:
    """``folder`` as a link from inside ``out`` (None when it is not under ``out``)."""
    if folder is None:
        return None
    try:
        return folder.resolve().relative_to(out.resolve()).as_posix()
    except ValueError:
        return None


def write_reports(result: MatrixResult, out: Path, issues: Optional[Path] = None) -> dict[str, Path]:
    """Write the plots, ``matrix.md`` and ``matrix.json`` into ``out``; return their paths. ``issues``: the
    folder of the issue drafts, linked from ``matrix.md`` when it is inside ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(result, out)
    write_redacted(out / MARKDOWN_FILE, markdown(result, plots, _relative(issues, out)))
    write_redacted(out / JSON_FILE, json.dumps(json_data(result, plots), indent=2) + "\n")
    return {"markdown": out / MARKDOWN_FILE, "json": out / JSON_FILE,
            **{f"plot {m}": out / name for m, name in plots.items()}}


def render_text(result: MatrixResult, paths: dict[str, Path]) -> str:
    """Terminal summary: the headline, each regression, the bisects and where the reports are."""
    lines = [f"{headline(result)} (run {result.run_id}, {report_cells.counts(result)}, "
             f"probes run: {result.probes_run}, reused: {result.measurements_reused})"]
    for cell in result.regressions:
        state = "confirmed" if cell.confirmed else "not confirmed"
        moved = ", ".join(f"{p} {cell.baseline.versions[p]} -> {cell.versions[p]}" for p in cell.moved_packages)
        why = f" ({cell.reason})" if cell.reason else ""
        peaks = f"; {cell.peaks}" if cell.peaks else ""
        lines.append(f"  regression at {cell.key} [{moved or 'no version moved'}]{why}: {state}{peaks}")
    lines += report_cells.text_lines(result) + text_lines(result)
    for b in result.bisects:
        lines.append(f"  bisect {b.package} {b.good}..{b.bad}: {b.status}"
                     + (f", first bad {b.first_bad}" if b.first_bad else ""))
    lines += [f"note: {n}" for n in result.notes]
    lines += [f"{name}: {path}" for name, path in paths.items()]
    return visible("\n".join(lines))
