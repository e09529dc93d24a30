"""The matrix report's sections for the steps along the versions and the history's change points
(markdown and terminal lines), and the headline's words for them."""
from __future__ import annotations

from typing import Optional

from bisector.core.units import human_value
from bisector.matrix.grid_result import HistoryChange, HistoryLine, MatrixResult, VersionStep
from bisector.matrix.peaks_said import peaks_said
from bisector.report.common import md_escape


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("s" if n != 1 else "")


def findings(result: MatrixResult) -> list[str]:
    """'1 new step along the versions', '2 new change points in the history' (what counts for exit 1
    besides the confirmed regressions against the baseline)."""
    out = []
    if result.new_steps:
        out.append(f"{_plural(len(result.new_steps), 'new step')} along the {result.packages[0]} versions")
    if result.new_changes:
        out.append(f"{_plural(len(result.new_changes), 'new change point')} in the history")
    return out


def peaks_behind(result: MatrixResult, s: VersionStep) -> str:
    """'; the GA=1 peaks fell (...), the GA=2 peaks did not change; no peak rose' for a derived metric
    whose two cells hold the peaks it is computed from (see Explainer.behind); '' otherwise."""
    said = s.peaks
    if said is None:   # a run stored before steps kept it: from its two cells
        cells = {c.key: c for c in result.cells}
        good, bad = cells.get(s.good_key), cells.get(s.bad_key)
        said = peaks_said(good.metrics, bad.metrics, s.metric) if good is not None and bad is not None else None
    return f"; {said}" if said else ""


def _step_text(s: VersionStep, result: Optional[MatrixResult] = None) -> str:
    moved = f"{human_value(s.good_value, s.metric)} → {human_value(s.bad_value, s.metric)}"
    limit = f" (beyond {human_value(s.threshold, s.metric)})" if s.threshold is not None else ""
    again = ", ".join(human_value(v, s.metric) for v in s.confirm_values)
    state = "confirmed" if s.confirmed else "not confirmed"
    where = f" with {s.line}" if s.line else ""
    behind = peaks_behind(result, s) if result is not None else ""
    return (f"{s.package} {s.good} → {s.bad}{where}: {s.metric} {moved}{limit}{behind}; re-measured {again or '-'}: "
            f"{state}{', new' if s.new and s.confirmed else ', known from the baseline run' if not s.new else ''}")


def _change_text(line: HistoryLine, c: HistoryChange, run: bool = True) -> str:
    p = f", p={c.p_value:.2g}" if c.p_value is not None else ""
    versions = ", ".join(f"{k} {v}" for k, v in c.versions.items())
    kind = "regression" if c.regression else "shift"
    night = f"run {c.run_id}, {c.created[:10]}, " if run else ""
    return (f"{line.key} {line.metric}: night {c.night} of {len(line.nights)} ({night}"
            f"{versions}): {human_value(c.before, line.metric)} → {human_value(c.after, line.metric)} "
            f"({c.relative:+.1%}{p}, {line.method.value}): {kind}{', new' if c.new else ''}")


def text_lines(result: MatrixResult) -> list[str]:
    """Terminal lines: each step along the versions and each change point."""
    lines = [f"  step {_step_text(s, result)}" for s in result.version_steps]
    lines += [f"  change {_change_text(line, c)}" for line in result.history_lines for c in line.changes]
    return lines


def markdown_sections(result: MatrixResult) -> list[str]:
    """'## Steps along the versions' and '## History' (only what there is to say)."""
    out = []
    if result.version_steps:
        out += ["", f"## Steps along the {md_escape(result.packages[0])} versions", ""]
        out += [f"- {md_escape(_step_text(s, result), line_start=True)}" for s in result.version_steps]
    lines = result.history_lines
    if lines:
        nights = max(len(line.nights) for line in lines)
        methods = ", ".join(sorted({line.method.value for line in lines}))
        changed = [(line, c) for line in lines for c in line.changes]
        out += ["", f"## History ({_plural(nights, 'night')}, {methods})", ""]
        out += [f"- {md_escape(_change_text(line, c, run=False), line_start=True)} (run `{c.run_id}`)"
                for line, c in changed]
        if not changed:
            out.append(f"No change points on {_plural(len(lines), 'line')}.")
    return out
