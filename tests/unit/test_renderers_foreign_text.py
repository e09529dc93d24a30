"""Issue 34, "one rule for foreign text", asserted of EVERY renderer at once (hypothesis): arbitrary unicode, control
characters and markup in every field that comes from outside (commit subjects and authors, refs, versions, package
and metric names, probe reasons, notes, arguments, config values) reach

* terminal text (the text report, ``log``, the matrix's text, ``probe``'s and ``diff``'s output, ``runs``, the
  progress lines, the error line) with no raw control character (C0 but newline and tab, DEL, C1), ESC, bidi or
  zero-width control;
* markdown (the bisect report, the matrix's matrix.md, the issue drafts) with none of those either, and, as
  CommonMark (markdown-it) reads it, no live tag (only the renderer's own <details>/<summary>/<pre> and a draft's
  own comment), no link that is not http(s), every code fence closed;
* the HTML page (``matrix --html``) with only the page's own tags and attributes: no script, no event handler,
  no javascript: link;
* the repro script with every header line a comment, nothing acting in it, and the script still valid Python.
"""
from __future__ import annotations

import ast
import io
import re
import tempfile
from html.parser import HTMLParser
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings, strategies as st
from markdown_it import MarkdownIt

from bisector.repro.compose import repro_script
from bisector.cli.cmd_probe import probe_lines
from bisector.cli.main import main
from bisector.console.live import PlainProgress
from bisector.core.changes import Change, ChangeKind, Trial
from bisector.core.measurement import Measurement, Status
from bisector.core.result import BisectResult
from bisector.core.points import Point
from bisector.difference.diff_model import DiffResult, Setup
from bisector.difference.diff_report import render_diff_text
from bisector.job.config import JobConfig
from bisector.matrix.draft_text import text as draft_text
from bisector.matrix.grid_config import MatrixConfig
from bisector.matrix.grid_report import markdown as matrix_markdown, render_text as matrix_text
from bisector.matrix.grid_result import CellResult
from bisector.matrix.html import page
from bisector.matrix.issue_drafts import track
from bisector.job.probe import ExitCodeProbe
from bisector.report.render import render_markdown
from bisector.report.text import render_log, render_text
from bisector.safety.safe_text import error_line
from bisector.store.storage import RunKind, RunRow, StepRow, Store, now
from tests.unit.test_matrix_drafts import CRIT, night, step
from tests.unit.test_safe_text import ACTING, TEXT

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OWN_HTML = re.compile(r"</?(details|summary|pre)>|<br>|<!-- bisector issue draft [^\n]*-->\n?")
PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "strong", "code", "table", "tr",
             "th", "td", "ul", "li", "a", "svg", "g", "line", "path", "polyline", "circle", "rect", "text", "title",
             "desc", "tspan", "defs", "clippath", "marker"}
STACK_TEXT = st.lists(TEXT, min_size=6, max_size=6)
HOSTILE = ["\x1b]0;title\x07\x1b[2J", "1.0<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "2.0`<b>x",
           "[a](javascript:alert(1)) \u202eevil", "```\n<script>\n```"]   # always tried, besides what is drawn


def terminal(text: str) -> str:
    assert not ACTING.search(text), ACTING.findall(text)
    return text


def commonmark(md: str) -> None:
    """No acting character; no live tag but the renderer's own; links http(s) only; every fence closed."""
    assert not ACTING.search(md), ACTING.findall(md)
    md_lines = md.splitlines()
    for token in MarkdownIt("commonmark").parse(md):
        if token.type == "html_block":   # the renderer's own tags, and text with no tag of its own
            assert not re.search(r"<[A-Za-z/!?]", OWN_HTML.sub("", token.content)), token.content
        if token.type == "fence":
            closing = md_lines[token.map[1] - 1].strip() if token.map[1] - 1 < len(md_lines) else ""
            assert token.map[1] - token.map[0] >= 2 and set(closing) == {token.markup[0]} and \
                len(closing) >= len(token.markup), (token.markup, closing)
        for child in token.children or []:
            if child.type == "html_inline":
                assert OWN_HTML.fullmatch(child.content), child.content
            if child.type == "link_open":
                assert child.attrs["href"].startswith(("http://", "https://")), child.attrs["href"]
            assert child.type != "image", child


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.bad: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in PAGE_TAGS:
            self.bad.append(tag)
        for name, value in attrs:
            if name.startswith("on") or (name in ("href", "src", "xlink:href") and not re.match(
                    r"^(https?://|[\w.+-]+\.(md|png)$|issues/[\w.+-]+\.md$|#)", value or "")):
                self.bad.append(f"{tag} {name}={value}")


def _point(sha: str, value: float, t: list[str]) -> Point:
    return Point(ref=t[0] or sha[:12], kind="commit", sha=sha, subject=t[1], author=t[2], value=value, pr=None,
                 link="javascript:alert(1)", env={"python": "3.11", "torch": "2.13.0", "gpu": t[3], t[4] or "x": t[5]},
                 pins=[f"numpy=={t[5]}"])


def _bisect(t: list[str]) -> BisectResult:
    return BisectResult(run_id="r1", package=t[0] or "acc", mode="commit", status="found", reason=t[1], criterion=t[2],
                        metric="m", threshold=2.0, last_good=_point("a" * 40, 1.0, t), first_bad=_point("b" * 40, 3.0, t[::-1]),
                        notes=[t[3], t[4]], command=f"bisector run --good {t[5]!r} --repo /home/x/{t[0]!r}",
                        repo_url="https://github.com/o/acc", refine_command=t[5])


@EXAMPLES
@example(HOSTILE)
@given(STACK_TEXT)
def test_the_bisect_report_text_markdown_and_log(t):
    result = _bisect(t)
    terminal(render_text(result, notes_shown=True))
    commonmark(render_markdown(result))
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "s.db")
        run = RunRow(id="r1", created=now(), updated=now(), kind=RunKind.BISECT, command=["bisector", "run", t[0]],
                     config={"job": {"package": t[1], "good": t[2], "bad": t[3]}}, status="found",
                     result=result.model_dump(mode="json"))
        store.put_run(run)
        store.add_step(StepRow(run_id="r1", seq=0, candidate=t[4], verdict="bad", value=1.0, reason=t[5], seconds=1.0,
                               measurements=[]))
        terminal(render_log(store, run))
        store.close()


def _matrix(t: list[str]):
    result = night(1, "1.5.0", 2.0, [step("1.5.0", 2.0)])
    cells = result.cells + [CellResult(key=t[0], labels=[t[1], t[2]], versions={"acc": "1.6.0", "tf": t[2]},
                                       status=Status.CRASHED, reason=t[3], verdict="failed")]
    result = result.model_copy(update={"cells": cells, "notes": [t[4]], "probe": t[5], "criterion": t[0]})
    return result.model_copy(update={"issue_drafts": track([], result, CRIT)})


@EXAMPLES
@example(HOSTILE)
@given(STACK_TEXT)
def test_the_matrix_text_markdown_page_and_issue_drafts(t):
    result = _matrix(t)
    terminal(matrix_text(result, {}))
    commonmark(matrix_markdown(result, {}))
    tags = _Tags()
    tags.feed(page(result, []))
    assert not tags.bad, tags.bad
    config = MatrixConfig.model_validate({"matrix": {"grid": {"acc": ["1.0.0", "latest"], "tf": ["4.0"]}},
                                          "probe": {"name": "ga_memory", "args": ["--loop", t[1]]}})
    [draft] = result.issue_drafts
    draft = draft.model_copy(update={"good": t[3] or "1.0", "version": t[4] or "2.0", "first_bad": t[2] or None,
                                     "metric": t[5] or "m"})
    with tempfile.TemporaryDirectory() as tmp:
        commonmark(draft_text(draft, result, config, Store(Path(tmp) / "s.db")))


@EXAMPLES
@example(HOSTILE)
@given(STACK_TEXT)
def test_probe_and_diff_output(t):
    m = Measurement(key="k", package="acc", candidate="1.0", env_fingerprint="e", probe_fingerprint="p",
                    status=Status.CRASHED, reason=t[0], metrics={t[1] or "m": 1.0}, seconds=1.0,
                    details={"result": {"meter": t[2], "device": {"type": "cuda", "name": t[3]}}})
    terminal("\n".join(probe_lines(t[4] or "acc", t[5], m, False, ExitCodeProbe(cmd="true", args=[t[0]]), t[1])))
    change = Change(kind=ChangeKind.PACKAGE, name=t[0], a=t[1], b=t[2])
    diff = DiffResult(run_id="d1", status="found", reason=t[3], package=t[4], version=t[5], criterion=t[0],
                      a=Setup(packages={"x": t[1]}), b=Setup(args=[t[2]]), changes=[change], minimal=[change],
                      trials=[Trial(seq=0, label=t[3], verdict="skip", reason=t[4])], notes=[t[5]],
                      follow_command=t[0])
    terminal(render_diff_text(diff))


def _storable(text: str) -> str:
    """``text`` as a job may hold it: no NUL byte, no lone surrogate (a job refuses both, in one line)."""
    return re.sub("[\x00\ud800-\udfff]", "", text)


@EXAMPLES
@example(HOSTILE)
@given(STACK_TEXT)
def test_the_repro_script_header(t):
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "p.py"
        probe.write_text("import json, os\njson.dump({'metrics': {'m': 3.0}}, open(os.environ['BISECTOR_RESULT'], 'w'))\n")
        config = JobConfig.model_validate({"job": {"package": "acc", "good": "1.0", "bad": "2.0", "index_url":
                                                   "https://example.invalid/simple"},
                                           "probe": {"path": str(probe), "args": [_storable(t[0])]},
                                           "criterion": {"metric": "m", "threshold": 2}})
        text = repro_script(_bisect(t).model_copy(update={"package": "acc"}), config, "r.py").text
    ast.parse(text)
    head = text.split('"""', 1)[0].splitlines()
    assert head[0] == "#!/usr/bin/env python3" and all(line.startswith("#") for line in head if line)
    assert not ACTING.search(text), ACTING.findall(text)


@EXAMPLES
@example(HOSTILE)
@given(STACK_TEXT)
def test_runs_progress_and_error_lines(t):
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "s.db")
        store.put_run(RunRow(id="r1", created=now(), updated=now(), kind=RunKind.BISECT, command=["bisector", t[0]],
                             config={"job": {"package": t[1], "good": t[2], "bad": t[3]}}, status="running"))
        store.close()
        out, err = io.StringIO(), io.StringIO()
        import contextlib
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            assert main(["runs", "--store", str(Path(tmp) / "s.db")]) == 0
        terminal(out.getvalue() + err.getvalue())
    stream = io.StringIO()
    PlainProgress(stream).print(f"  building {t[4]} {t[5]}")
    terminal(stream.getvalue())
    terminal(error_line(f"'{t[0]}' is not a valid version: {t[1]}"))
