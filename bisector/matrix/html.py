"""``bisector matrix --html DIR``: one static page (no server, no script, opens from disk) with, per
metric, a plot of every cell over the stored nights (change points marked) and a plot of every grid
line over the candidate's versions (as steps: a release holds its value until the next one; steps
along the versions marked), and links to the bisect reports that followed (copied next to the page).
The plots are inline SVG drawn here, so the page needs nothing beside itself."""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from bisector.core.units import human_value
from bisector.matrix.grid_result import HistoryLine, MatrixResult
from bisector.matrix.grid_report import MARKDOWN_FILE, headline
from bisector.matrix.steps import grid_lines
from bisector.redact import write_redacted

PAGE = "index.html"
W, H, LEFT, RIGHT, TOP, BOTTOM = 680, 260, 78, 16, 30, 58
STYLE = """body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}svg.plot{display:block;margin:8px 0 18px;background:#fcfcfc;
border:1px solid #ddd}.axis{stroke:#999}.grid{stroke:#eee}.series{fill:none;stroke:#1f77b4;stroke-width:2}
.point{fill:#1f77b4}.change-point{stroke:#d62728;stroke-dasharray:5 4;stroke-width:2}.mark{fill:#d62728}
text{font-size:11px;fill:#444}.title{font-size:13px;fill:#111}.found{color:#b00}"""


@dataclass
class Chart:
    """One plot: labels along x, a value (or a gap) per label, drawn as points or as steps, with marks
    (x index, label) drawn as dashed vertical lines (change points) or red rings (``ring_marks``)."""

    title: str
    metric: str
    kind: str
    labels: list[str]
    values: list[Optional[float]]
    steps: bool = False
    marks: list[tuple[int, str]] = field(default_factory=list)
    ring_marks: bool = False


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _scale(values: list[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
    return lo - pad, hi + pad


def _x(index: int, count: int) -> float:
    return LEFT + (W - LEFT - RIGHT) * (index / (count - 1) if count > 1 else 0.5)


def _xy(chart: Chart) -> list[Optional[tuple[float, float]]]:
    known = [v for v in chart.values if v is not None]
    lo, hi = _scale(known) if known else (0.0, 1.0)
    n = len(chart.labels)
    return [None if v is None else (_x(i, n), TOP + (H - TOP - BOTTOM) * (1 - (v - lo) / (hi - lo)))
            for i, v in enumerate(chart.values)]


def _path(points: list[Optional[tuple[float, float]]], steps: bool) -> str:
    drawn = [p for p in points if p is not None]
    if len(drawn) < 2:
        return ""
    d = f"M{drawn[0][0]:.1f},{drawn[0][1]:.1f}"
    for x, y in drawn[1:]:
        d += f" H{x:.1f} V{y:.1f}" if steps else f" L{x:.1f},{y:.1f}"
    return f'<path class="series" d="{d}"/>'


def svg(chart: Chart) -> str:
    """The chart as an inline ``<svg class="plot">``."""
    points = _xy(chart)
    known = [v for v in chart.values if v is not None]
    lo, hi = _scale(known) if known else (0.0, 1.0)
    parts = [f'<svg class="plot" data-metric="{_esc(chart.metric)}" data-kind="{chart.kind}" width="{W}" height="{H}" '
             f'viewBox="0 0 {W} {H}" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{_esc(chart.title)}">',
             f'<text class="title" x="{LEFT}" y="18">{_esc(chart.title)}</text>',
             f'<line class="axis" x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}"/>',
             f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}"/>']
    for value, y in ((hi, TOP), ((hi + lo) / 2, (TOP + H - BOTTOM) / 2), (lo, H - BOTTOM)):
        parts.append(f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}"/>'
                     f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_esc(human_value(value, chart.metric))}</text>')
    every = max(1, len(chart.labels) // 12)
    for i, label in enumerate(chart.labels):
        if i % every == 0 or i == len(chart.labels) - 1:
            x = _x(i, len(chart.labels))
            parts.append(f'<text x="{x:.1f}" y="{H - BOTTOM + 14}" text-anchor="end" '
                         f'transform="rotate(-30 {x:.1f} {H - BOTTOM + 14})">{_esc(label)}</text>')
    parts.append(_path(points, chart.steps))
    parts += [f'<circle class="point" cx="{p[0]:.1f}" cy="{p[1]:.1f}" r="3.5"><title>{_esc(lbl)}: '
              f'{_esc(human_value(v, chart.metric))}</title></circle>'
              for p, lbl, v in zip(points, chart.labels, chart.values) if p is not None]
    parts += [_mark(chart, points, i, text) for i, text in chart.marks]
    return "".join(parts) + "</svg>"


def _mark(chart: Chart, points: list, index: int, text: str) -> str:
    x = _x(index, len(chart.labels))
    if chart.ring_marks and points[index] is not None:
        px, py = points[index]
        right = px > W / 2   # label on the side with room
        return (f'<circle class="change-point mark-ring" cx="{px:.1f}" cy="{py:.1f}" r="8" fill="none"/>'
                f'<text class="mark" x="{px - 12 if right else px + 12:.1f}" y="{py - 10:.1f}" '
                f'text-anchor="{"end" if right else "start"}">{_esc(text)}</text>')
    return (f'<line class="change-point" x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{H - BOTTOM}"/>'
            f'<text class="mark" x="{x + 4:.1f}" y="{TOP + 12}">{_esc(text)}</text>')


def night_chart(line: HistoryLine) -> Chart:
    """A cell's metric over the stored nights (a night's value holds until the next), change points marked."""
    labels = [f"{i + 1}: {n.created[:10]}" for i, n in enumerate(line.nights)]
    marks = [(c.night - 1, f"{c.relative:+.1%}" + (" new" if c.new and c.regression else "")) for c in line.changes]
    return Chart(f"{line.metric} of cell {line.key} over {len(line.nights)} nights ({line.method.value})", line.metric,
                 "nights", labels, [n.value for n in line.nights], steps=True, marks=marks)


def version_charts(result: MatrixResult, metric: str) -> list[Chart]:
    """Each grid line's metric over the candidate's versions in this run, as steps, with its steps marked."""
    cand, charts = result.packages[0], []
    for name, cells in grid_lines(result).items():
        labels = [c.versions[cand] for c in cells]
        marks = [(labels.index(s.bad), f"{s.good} → {s.bad}") for s in result.version_steps
                 if s.line == name and s.metric == metric and s.bad in labels]
        title = f"{metric} over {cand} versions" + (f" with {name}" if name else "")
        charts.append(Chart(title, metric, "versions", labels, [c.metrics.get(metric) for c in cells], steps=True,
                            marks=marks, ring_marks=True))
    return charts


def _links(result: MatrixResult, out: Path) -> list[str]:
    rows = [f'<li><a class="report" href="{_esc(MARKDOWN_FILE)}">{_esc(MARKDOWN_FILE)}</a>: the run\'s report</li>']
    for b in result.bisects:
        if b.report_file and re.fullmatch(r"[\w.+-]+\.md", b.report_file):
            write_redacted(out / b.report_file, b.markdown)
            first = f", first bad {_esc(b.first_bad)}" if b.first_bad else ""
            rows.append(f'<li><a class="bisect-report" href="{_esc(b.report_file)}">bisect {_esc(b.package)} '
                        f'{_esc(b.good)} → {_esc(b.bad)}</a>: {_esc(b.status)}{first}</li>')
    return ["<h2>Reports</h2>", "<ul>", *rows, "</ul>"]


def page(result: MatrixResult, links: list[str]) -> str:
    """The whole page."""
    found = ' class="found"' if result.exit_code == 1 else ""
    body = [f"<h1>Version matrix: {_esc(result.packages[0])}</h1>",
            f"<p{found}><strong>{_esc(headline(result))}</strong> · run <code>{_esc(result.run_id)}</code> · "
            f"{_esc(result.created[:19])}Z · criterion: {_esc(result.criterion)}</p>", *links]
    for metric in result.metrics:
        body.append(f"<h2>{_esc(metric)}</h2>")
        body += [svg(night_chart(line)) for line in result.history_lines if line.metric == metric]
        body += [svg(chart) for chart in version_charts(result, metric)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>Version matrix: {_esc(result.packages[0])}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def write_html(result: MatrixResult, out: Path, report_dir: Path) -> Path:
    """Write ``index.html`` (and copies of the run's reports it links to) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    report = report_dir / MARKDOWN_FILE
    if report.is_file() and report.resolve() != (out / MARKDOWN_FILE).resolve():
        write_redacted(out / MARKDOWN_FILE, report.read_text())
    return write_redacted(out / PAGE, page(result, _links(result, out)))
