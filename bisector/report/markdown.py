"""The markdown report for an upstream issue: at most 25 lines a maintainer reads before any
``<details>`` (bisector.report.md_visible), everything else in named folded blocks
(bisector.report.md_details), and never more than GitHub takes in an issue body (65,536 characters):
beyond it the folded blocks are cut, largest first, with a note, never the visible part.
"""
from __future__ import annotations

import dataclasses

from bisector.core.result import BisectResult
from bisector.safety import safe_text
from bisector.report.md_details import blocks
from bisector.report.md_inline import Block
from bisector.report.md_visible import visible

GITHUB_LIMIT = 65_536   # characters in an issue or comment body


def _text(head: list[str], parts: list[list[str]]) -> str:
    return "\n".join(head + [line for part in parts for line in part]).rstrip() + "\n"


def _size(lines: list[str]) -> int:
    return sum(len(line) + 1 for line in lines)


def fit(head: list[str], folded: list[Block], limit: int, where: str) -> str:
    """``head`` and the ``folded`` blocks as one text of at most ``limit`` characters: the largest
    blocks lose their last lines first, each cut block says so (``where``: the full report)."""
    parts = [b.render() for b in folded]
    over = len(_text(head, parts)) - limit
    for i in sorted(range(len(folded)), key=lambda k: -_size(parts[k])):
        if over <= 0:
            break
        block, sizes = folded[i], folded[i].sizes()
        keep, dropped = len(sizes), 0
        while keep > 0 and dropped < over + 400:   # room for the note
            keep -= 1
            dropped += sizes[keep]
        while True:
            note = (f"(cut to fit GitHub's {limit:,}-character limit: {keep} of {len(sizes)} lines shown; the full "
                    f"report: {where})")
            cut = block.render(block.body[:keep] + ([note] if block.raw else ["", note]))
            saved = _size(parts[i]) - _size(cut)
            if saved >= over or keep == 0:
                break
            keep -= 1
        parts[i], over = cut, over - saved
    return _text(head, parts)


def markdown(r: BisectResult, limit: int = GITHUB_LIMIT) -> str:
    """The whole report (ends with a newline), at most ``limit`` characters; no control, bidi or
    invisible character of the text it quotes reaches it raw (bisector.safety.safe_text)."""
    head = [safe_text.visible(line) for line in visible(r)]
    folded = [dataclasses.replace(b, summary=safe_text.visible(b.summary), body=[safe_text.visible(x) for x in b.body])
              for b in blocks(r)]
    return safe_text.visible(fit(head, folded, limit, f"`bisector report {r.run_id}`"))
