"""The cells a matrix run did not measure, said where they are seen (the terminal, ``matrix.md``): the
invalid combinations (never built), and every cell not measured whole with its one-line reason and
what it means against the baseline (lost tonight, a known failure, the regression itself)."""
from __future__ import annotations

from bisector.matrix.grid_result import CellResult, CellVerdict, MatrixResult
from bisector.report.common import md_escape


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("s" if n != 1 else "")


def where(versions: dict[str, str]) -> str:
    """'accelerate==1.13.0, transformers==5.24.0'."""
    return ", ".join(f"{p}=={v}" for p, v in versions.items())


def standing(cell: CellResult) -> str:
    """What the cell's state means against the baseline."""
    if cell.verdict is CellVerdict.LOST:
        if cell.baseline is None:
            return "lost: no run of this grid has measured it yet"
        return "lost: the baseline measured it"
    if cell.verdict is CellVerdict.REGRESSION:
        return "the regression: " + ("confirmed on re-measurement" if cell.confirmed else "not confirmed")
    if cell.verdict is CellVerdict.FAILED:
        return "a known failure: the baseline could not measure it either"
    return "no baseline to compare with" if cell.baseline is None else "the baseline had it too"


def lost_words(result: MatrixResult) -> list[str]:
    """'2 cells lost' for the headline (what counts for the cells-lost exit code)."""
    return [f"{_plural(len(result.lost), 'cell')} lost"] if result.lost else []


def counts(result: MatrixResult) -> str:
    """'6 of 7 cells measured, 1 not a valid combination'."""
    whole = len(result.cells) - len(result.unmeasured)
    total = len(result.cells) + len(result.invalid)
    text = f"{whole} of {_plural(total, 'cell')} measured"
    return text + (f", {len(result.invalid)} not a valid combination" if result.invalid else "")


def _line(cell: CellResult) -> str:
    status = "ok, partly" if cell.oom and cell.status.measured else cell.status.value
    return f"{where(cell.versions)} ({cell.key}): {status}: {cell.reason or '-'} ({standing(cell)})"


def text_lines(result: MatrixResult) -> list[str]:
    """Terminal lines: each invalid combination, each cell not measured whole."""
    lines = [f"  not a valid combination: {where(c.versions)}: {c.reason}" for c in result.invalid]
    return lines + [f"  not measured: {_line(c)}" for c in result.unmeasured]


def markdown_sections(result: MatrixResult) -> list[str]:
    """'## Not measured' and '## Not a valid combination' (only what there is to say)."""
    out = []
    if result.unmeasured:
        out += ["", f"## Not measured ({_plural(len(result.unmeasured), 'cell')}, {len(result.lost)} lost)", ""]
        out += [f"- {md_escape(_line(c), line_start=True)}" for c in result.unmeasured]
    if result.invalid:
        out += ["", f"## Not a valid combination ({_plural(len(result.invalid), 'cell')}, never built)", ""]
        out += [f"- {md_escape(where(c.versions), line_start=True)}: {md_escape(c.reason)}" for c in result.invalid]
    return out
