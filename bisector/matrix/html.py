"""``bisector matrix --html DIR``: one static page (no server, no script, nothing from the network:
it opens from disk) with tonight's cells as a table (the numbers of ``matrix.json``), the cells that
were not measured and why, and per metric a chart of every cell over the stored nights (change
points marked) and one of every grid line over the candidate's versions (as steps: a release holds
its value until the next one; steps along the versions marked). The files it links (``matrix.md``
and the plots it links, the bisect reports, the issue drafts) are copied next to it, so every link
of the page and of its ``matrix.md`` resolves."""
from __future__ import annotations

import re
from pathlib import Path

from packaging.version import Version

from bisector.core.units import human_value
from bisector.matrix.grid_report import MARKDOWN_FILE, headline
from bisector.matrix.grid_result import CellResult, HistoryLine, MatrixResult
from bisector.matrix.report_cells import counts, standing, where
from bisector.matrix.steps import grid_lines
from bisector.matrix.svg_chart import Chart, Series, esc, svg
from bisector.redact import write_redacted
from bisector.safety.safe_write import copy_atomic

PAGE = "index.html"
SERIES_PER_CHART = 10
STYLE = """body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}h3{font-size:15px}li,p{overflow-wrap:anywhere}
svg.plot{display:block;margin:8px 0 18px;background:#fcfcfc;border:1px solid #ddd;max-width:100%;height:auto}
.axis{stroke:#999}.grid{stroke:#eee}.series{fill:none;stroke-width:2}.mark-ring{stroke:#d62728;stroke-width:2}
.mark{fill:#d62728}text{font-size:11px;fill:#444;font-family:system-ui,sans-serif}.title{font-size:13px;fill:#111}
.axis-title{fill:#111}.found{color:#b00}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}td.v{overflow-wrap:anywhere}td.num{text-align:right;font-variant-numeric:tabular-nums}
.lost{color:#b00;font-weight:bold}"""
_SAFE_FILE = re.compile(r"[\w.+-]+\.(md|png)")


def _night_labels(lines: list[HistoryLine]) -> tuple[list[str], dict[str, int]]:
    runs = sorted({(n.created, n.run_id) for line in lines for n in line.nights})
    return [f"{i + 1}: {created[:10]}" for i, (created, _) in enumerate(runs)], \
        {run: i for i, (_, run) in enumerate(runs)}


def night_charts(result: MatrixResult, metric: str) -> list[Chart]:
    """Every cell's metric over the stored nights (a night's value holds until the next), change points
    marked; at most ``SERIES_PER_CHART`` cells a chart."""
    lines = [line for line in result.history_lines if line.metric == metric]
    if not lines:
        return []
    labels, index = _night_labels(lines)
    charts = []
    for start in range(0, len(lines), SERIES_PER_CHART):
        group, series = lines[start:start + SERIES_PER_CHART], []
        for line in group:
            values = [None] * len(labels)
            for n in line.nights:
                values[index[n.run_id]] = n.value
            marks = [(index[c.run_id], f"{c.relative:+.1%}" + (" new" if c.new and c.regression else ""))
                     for c in line.changes if c.run_id in index]
            series.append(Series(f"cell {line.key}", values, marks))
        methods = " and ".join(sorted({METHOD_WORDS.get(line.method.value, line.method.value) for line in group}))
        charts.append(Chart(f"{metric} of each cell over {len(labels)} nights (change points: {methods})"
                            f"{_part(start, len(lines))}",
                            metric, "nights",
                            "night: date of the run", labels, series, mark_legend="change point (its shift)"))
    return charts


# the method in words: a bare "(percent)" above a B/param axis read as the axis's unit
METHOD_WORDS = {"percent": "% against the previous night", "e-divisive": "E-Divisive means"}


def _part(start: int, total: int) -> str:
    return f" ({start // SERIES_PER_CHART + 1} of {-(-total // SERIES_PER_CHART)})" if total > SERIES_PER_CHART else ""


def version_chart(result: MatrixResult, metric: str) -> list[Chart]:
    """Each grid line's metric over the candidate's versions in this run, as steps, its steps marked; at
    most ``SERIES_PER_CHART`` lines a chart."""
    cand, lines = result.packages[0], grid_lines(result)
    labels = sorted({c.versions[cand] for cells in lines.values() for c in cells}, key=Version)
    series = []
    for name, cells in lines.items():
        by_version = {c.versions[cand]: c.metrics.get(metric) for c in cells}
        marks = [(labels.index(s.bad), f"{s.good} → {s.bad}") for s in result.version_steps
                 if s.line == name and s.metric == metric and s.bad in labels]
        if any(v is not None for v in by_version.values()):
            series.append(Series(name or cand, [by_version.get(v) for v in labels], marks))
    return [Chart(f"{metric} over the {cand} versions, tonight{_part(i, len(series))}", metric, "versions",
                  f"{cand} version", labels, series[i:i + SERIES_PER_CHART], mark_legend="step along the versions")
            for i in range(0, len(series), SERIES_PER_CHART)]


def _row(result: MatrixResult, cell: CellResult) -> str:
    items = [f'<td class="v">{esc(cell.versions[p])}' + (f" ({esc(lbl)})" if lbl != cell.versions[p] else "") + "</td>"
             for p, lbl in zip(result.packages, cell.labels)]
    for metric in result.metrics:
        value = cell.metrics.get(metric)
        items.append(f'<td class="num" data-key="{esc(cell.key)}" data-metric="{esc(metric)}" data-value="{value!r}">'
                     f'{esc(human_value(value, metric))}</td>' if value is not None else '<td class="num">-</td>')
    lost = ' class="lost"' if cell.verdict == "lost" else ""
    items.append(f"<td{lost}>{esc(cell.verdict)}" + (f": {esc(cell.reason)}" if cell.reason else "") + "</td>")
    return "<tr>" + "".join(items) + "</tr>"


def _tonight(result: MatrixResult) -> list[str]:
    head = "".join(f"<th>{esc(h)}</th>" for h in (*result.packages, *result.metrics, "verdict"))
    out = ["<h2>Tonight</h2>", f'<table class="cells"><tr>{head}</tr>', *(_row(result, c) for c in result.cells),
           "</table>"]
    if result.unmeasured:
        out += [f"<h3>Not measured ({len(result.unmeasured)}, {len(result.lost)} lost)</h3>", "<ul>"]
        out += [f'<li class="unmeasured">{esc(where(c.versions))}: {esc(c.status)}: {esc(c.reason or "-")} '
                f"({esc(standing(c))})</li>" for c in result.unmeasured]
        out.append("</ul>")
    if result.invalid:
        out += [f"<h3>Not a valid combination ({len(result.invalid)}, never built)</h3>", "<ul>"]
        out += [f'<li class="invalid">{esc(where(c.versions))}: {esc(c.reason)}</li>' for c in result.invalid]
        out.append("</ul>")
    return out


def _copy(source: Path, target: Path) -> bool:
    if not source.is_file():
        return False
    if source.resolve() != target.resolve():
        target.parent.mkdir(parents=True, exist_ok=True)
        copy_atomic(source, target)   # a link planted at the copy is replaced, never written through
    return True


def _links(result: MatrixResult, out: Path, report_dir: Path, drafts: dict[str, Path]) -> list[str]:
    """The page's links, each to a file copied next to it (a link to a missing file is never written)."""
    rows = []
    if _copy(report_dir / MARKDOWN_FILE, out / MARKDOWN_FILE):
        md = (out / MARKDOWN_FILE).read_text()
        for name in re.findall(r"\]\(([^)]+)\)", md):   # the plots and reports matrix.md links, copied too
            if _SAFE_FILE.fullmatch(name):
                _copy(report_dir / name, out / name)
        rows.append(f'<li><a class="report" href="{MARKDOWN_FILE}">{MARKDOWN_FILE}</a>: the run\'s report</li>')
    for b in result.bisects:
        if b.report_file and _SAFE_FILE.fullmatch(b.report_file):
            write_redacted(out / b.report_file, b.markdown)
            first = f", first bad {esc(b.first_bad)}" if b.first_bad else ""
            rows.append(f'<li><a class="bisect-report" href="{esc(b.report_file)}">bisect {esc(b.package)} '
                        f'{esc(b.good)} → {esc(b.bad)}</a>: {esc(b.status)}{first}</li>')
    for title, path in drafts.items():
        if _copy(path, out / "issues" / path.name):
            rows.append(f'<li><a class="issue-draft" href="issues/{esc(path.name)}">issue draft: {esc(title)}</a></li>')
    return ["<h2>Reports</h2>", "<ul>", *rows, "</ul>"] if rows else []


def page(result: MatrixResult, links: list[str]) -> str:
    """The whole page."""
    found = ' class="found"' if result.exit_code else ""
    body = [f"<h1>Version matrix: {esc(result.packages[0])}</h1>",
            f"<p{found}><strong>{esc(headline(result))}</strong> · {esc(counts(result))} · run "
            f"<code>{esc(result.run_id)}</code> · {esc(result.created[:19])}Z · "
            f"criterion: {esc(result.criterion)}</p>",
            *links, *_tonight(result)]
    for metric in result.metrics:
        charts = night_charts(result, metric) + version_chart(result, metric)
        if charts:
            body += [f"<h2>{esc(metric)}</h2>", *(svg(chart) for chart in charts)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>Version matrix: {esc(result.packages[0])}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def write_html(result: MatrixResult, out: Path, report_dir: Path, drafts: dict[str, Path] | None = None) -> Path:
    """Write ``index.html`` (and copies of the files it links to) into ``out``; ``drafts``: the issue
    drafts (title -> file) to link."""
    out.mkdir(parents=True, exist_ok=True)
    return write_redacted(out / PAGE, page(result, _links(result, out, report_dir, drafts or {})))
