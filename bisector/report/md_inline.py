"""The markdown report's building blocks: safe links, a candidate with its commit and PR links, tables,
folded ``<details>`` blocks (markdown or verbatim ``<pre>``) and indented code.

Everything that comes from outside (subjects, authors, probe messages, metric names) is escaped
(``md_escape``) or put in code spans that cannot be closed early (``md_code``); links are only
emitted for http(s) URLs, percent-encoded; blocks of raw text (the log, the probe config) go in
``<pre>`` with HTML entities, which GitHub and Python-Markdown both show verbatim.
"""
from __future__ import annotations

import html
import urllib.parse
from dataclasses import dataclass
from typing import Optional

from bisector.core.candidate import CandidateKind
from bisector.core.points import Point
from bisector.report.common import md_code


def safe_url(url: Optional[str]) -> Optional[str]:
    """An http(s) URL fit for a markdown link target (anything else: None)."""
    if not url:
        return None
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return urllib.parse.quote(url.strip(), safe="/:?#@!$&*+,;=%~-._")


def link(text: str, url: Optional[str]) -> str:
    """``[text](url)`` for a safe URL, else the text alone."""
    target = safe_url(url)
    return f"[{text}]({target})" if target else text


def ref(p: Point, package: Optional[str] = None) -> str:
    """`abc1234567` (#12) with commit and PR links, or the version for a release (``package``: named
    before it, for a candidate of another package than the table's)."""
    name = f"{package} " if package else ""
    if p.kind is not CandidateKind.COMMIT:
        return md_code(f"{name}{p.ref}")
    text = link(md_code(f"{name}{p.ref[:10]}"), p.link)
    if p.pr:
        text += f" ({link(f'#{p.pr}', p.pr_link)})"
    return text


def table(head: list[str], align: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table (cells already escaped), then a blank line."""
    return ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|",
            *("| " + " | ".join(row) + " |" for row in rows), ""]


def indented(command: str) -> list[str]:
    """An indented code block (copyable on GitHub, inert in every renderer)."""
    return ["    " + line for line in command.splitlines()] + [""]


@dataclass
class Block:
    """A folded part of the report: its summary and its body (markdown lines, or raw text for ``<pre>``)."""

    summary: str
    body: list[str]
    raw: bool = False      # the body is raw text, shown verbatim in <pre>

    def sizes(self) -> list[int]:
        """The characters each body line takes when rendered (with its newline)."""
        return [len(html.escape(line, quote=False) if self.raw else line) + 1 for line in self.body]

    def render(self, body: Optional[list[str]] = None) -> list[str]:
        lines = list(self.body if body is None else body)
        while lines and not lines[-1]:
            lines.pop()
        head = [f"<details><summary>{html.escape(self.summary)}</summary>", ""]
        if self.raw:
            text = "\n".join(html.escape(line, quote=False) for line in lines)
            return head + [f"<pre>\n{text}\n</pre>", "", "</details>", ""]
        return head + [*lines, "", "</details>", ""]


def fold(summary: str, lines: list[str]) -> list[str]:
    """A ``<details>`` block with the lines verbatim in ``<pre>``."""
    return Block(summary, lines, raw=True).render()
