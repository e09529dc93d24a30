"""Every sample output of README.md, docs/report.md and docs/seed-story.md is regenerated from a real run by
bench/readme_samples.py: each such block (a plain or markdown fence) stands right below a marker naming its
command, and the marker's command is exactly the one the doc shows for it (the block's own `$ ...` first
line, a line of the block of commands right above, or in backticks in the paragraph above the marker). Markers elsewhere in docs/ obey the same rules."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REGENERATED = [ROOT / "README.md", ROOT / "docs" / "report.md", ROOT / "docs" / "seed-story.md"]
SAMPLE_FENCE = re.compile(r"^```(markdown)?$")


def _script():
    spec = importlib.util.spec_from_file_location("readme_samples", ROOT / "bench" / "readme_samples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()


def _paragraph_above(lines: list[str], marker: int) -> str:
    """The text between the previous blank line (or block) and the marker, joined into one line."""
    i = marker - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    top = i
    while top >= 0 and lines[top].strip() and not lines[top].startswith("```"):
        top -= 1
    return " ".join(line.strip() for line in lines[top + 1:i + 1])


def shown(doc: Path, s) -> bool:
    """Whether the doc shows the marker's command: the block's `$` line, or a code span above it."""
    lines = doc.read_text().splitlines()
    block = lines[s.start:s.end]
    if block and block[0].startswith("$ "):
        return block[0] == f"$ {s.command}"
    i = s.line - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    if i >= 0 and lines[i] == "```":   # a block of commands right above (```sh)
        top = max(j for j in range(i) if lines[j].startswith("```"))
        return s.command in lines[top + 1:i]
    return f"`{s.command}`" in _paragraph_above(lines, s.line)


def unmarked(doc: Path) -> list[int]:
    """Line numbers of the sample-output fences (plain or markdown) with no marker right above them."""
    lines, out, inside = doc.read_text().splitlines(), [], False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            if not inside and SAMPLE_FENCE.match(line) and not (i and SCRIPT.MARKER.match(lines[i - 1])):
                out.append(i + 1)
            inside = not inside
    return out


@pytest.mark.parametrize("doc", REGENERATED, ids=lambda d: d.name)
def test_every_sample_block_is_marked(doc):
    assert unmarked(doc) == [], f"{doc.name}: sample blocks without a marker at lines {unmarked(doc)}"


@pytest.mark.parametrize("doc", SCRIPT.DOCS, ids=lambda d: d.name)
def test_every_markers_command_is_the_one_the_doc_shows(doc):
    for s in SCRIPT.samples(doc):
        assert s.command.startswith("bisector") and all(a.startswith("bisector") for a in s.after), s
        assert shown(doc, s), f"{doc.name}:{s.line + 1}: the marker's command {s.command!r} is not the one shown"


def test_the_checks_see_a_wrong_or_missing_marker(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("Run `bisector run`:\n\n<!-- sample: bisector run; part: 1-2 -->\n```\nreleases: x\n```\n\n"
                   "<!-- sample: bisector run --good 1 -->\n```\n$ bisector run --good 2\nout\n```\n\n```\nnot marked\n```\n"
                   "\n```toml\n[job]\n```\n")
    first, second = SCRIPT.samples(doc)
    assert shown(doc, first) and not shown(doc, second)
    assert unmarked(doc) == [14]
    assert SCRIPT.select(["a", "  b", "c", "d"], "1-1 & /^d/ & ...") == ["a", "...", "d", "..."]
    assert SCRIPT.select(["a", "  b", "c", "d"], "/^a/") == ["a", "  b", "..."][:2]   # a line and its wrapped rest
