"""Text from others is data (bisector.safety.safe_text) and files are written safely (bisector.safety.safe_write):
the rule's invariants on arbitrary unicode (hypothesis), the fences no content closes (CommonMark, as
markdown-it parses it), a command quoted on one line that bash reads back word for word, a probe source
embedded in the repro byte for byte, the repro header's requirements, writes that never follow a link."""
from __future__ import annotations

import shlex
import base64
import json
import os
import re
import stat
import subprocess

import pytest
from hypothesis import given, settings, strategies as st
from markdown_it import MarkdownIt

from bisector.repro.embed import embedded
from bisector.repro.header import header, installs
from bisector.core.result import BisectResult
from bisector.core.points import Point
from bisector.errors import UsageError
from bisector.matrix.draft_text import text as draft_text
from bisector.matrix.grid_config import MatrixConfig
from bisector.matrix.issue_drafts import track
from bisector.safety.safe_text import fenced, json_visible, one_line, shell_join, visible
from bisector.safety.safe_write import check_output_file, write_atomic
from bisector.store.storage import Store
from tests.unit.test_matrix_drafts import CRIT, night, step

# what visible() escapes, lone surrogates included (undecodable bytes of a path or argv: UTF-8 cannot write them)
ACTING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2060\u2066-\u2069\ufeff\ud800-\udfff]")
HOSTILE = ["\x1b]0;title\x07", "\x1b[2J", "\x9b31m", "\r", "\x08", "\x00", "\x7f", "\u202e", "\u2066", "\u2069",
           "\u200e", "\u200f", "\u061c", "\u2028", "\ufeff", "\u200b", "\ud800", "\udcff"]
# arbitrary text, with the characters that act on terminals and documents drawn often
TEXT = st.lists(st.one_of(st.characters(), st.sampled_from([*HOSTILE, "`", "```", "~~~", "\n", "<script>", "'", "\\",
                                                              "    ", "&lt;", "[x](javascript:alert(1))"])),
                max_size=20).map("".join)


def test_every_acting_character_is_shown_and_other_text_is_left_as_it_is():
    assert visible("a\x1b]0;title\x07b") == "a\\x1b]0;title\\x07b"
    assert visible("x\u202ey \u2066z\u2069 \x9b2J\r") == "x\\u202ey \\u2066z\\u2069 \\x9b2J\\r"
    plain = "First bad: accelerate 0.28.0 — GA cost rose 0.370 → 1.940 B/param\n\tçé 漢字 🙂 ‍"
    assert visible(plain) is plain and visible(None) == ""
    assert one_line("a\nb\tc") == "a\\nb\\tc" and one_line("plain") == "plain"


@settings(max_examples=150, deadline=None)
@given(TEXT)
def test_no_acting_character_survives_and_the_rule_is_idempotent(text):
    shown = visible(text)
    assert not ACTING.search(shown) and visible(shown) == shown
    assert shown.count("\n") == text.count("\n")        # lines are kept, none is added
    assert "\n" not in one_line(text) and not ACTING.search(one_line(text))
    if not ACTING.search(text):
        assert shown == text


@settings(max_examples=80, deadline=None)
@given(st.recursive(st.none() | st.booleans() | TEXT, lambda kids: st.lists(kids, max_size=3)
                    | st.dictionaries(TEXT, kids, max_size=3), max_leaves=8))
def test_json_keeps_the_same_data_with_nothing_acting_in_it(value):
    out = json_visible(json.dumps(value, ensure_ascii=False))
    # (as JSON reads any escapes: two lone surrogates that make a pair, '\ud800\udcff', are read as the pair)
    assert json.loads(out) == json.loads(json.dumps(value)) and not ACTING.search(out)


@settings(max_examples=150, deadline=None)
@given(TEXT, st.sampled_from(["", "sh", "a`b\x1b"]))
def test_no_content_closes_its_fence(text, info):
    tokens = MarkdownIt("commonmark").parse("\n".join(["before", "", *fenced(text, info), "", "after"]) + "\n")
    blocks = [t for t in tokens if t.type == "fence"]
    assert len(blocks) == 1 and blocks[0].content == "".join(line + "\n" for line in visible(text).splitlines())
    assert not [t for t in tokens if t.type == "html_block"]
    assert [t.content for t in tokens if t.type == "inline"] == ["before", "after"]


def test_a_command_on_one_line_reads_back_word_for_word_in_bash():
    words = ["a\n```\n<script>alert(1)</script>", "it's", "\\x1b\x1b[2J", "\u202eabc", "\t", "x\u0085y", "plain",
             "$(touch pwned)", "'", "\\", "", "`id`"]
    line = shell_join(["printf", "%s\\0", *words])
    assert "\n" not in line and not ACTING.search(line)
    ran = subprocess.run(["bash", "-c", line], capture_output=True, timeout=10)
    assert ran.stdout.decode().split("\0")[:-1] == words


EDGES = {"ends_in_quote.py": "X = 1\ns = 'a'", "ends_in_dquote.py": 'X = 1\ns = "a"',
         "triple.py": "s = '''x'''\nt = \"\"\"y\"\"\"\n", "backslash.py": "s = 'a\\\\'\n# ends in \\",
         "crlf.py": "x = 1\r\ny = 2\r\n", "bidi.py": "s = '\u202e' # \u2066\n", "controls.py": "s = '\x1b\x00\x0c'\n",
         "raw_trap.py": "s = r'\\''\n'''", "nothing.py": ""}


@pytest.mark.parametrize("name", sorted(EDGES))
def test_an_embedded_probe_source_is_the_original_byte_for_byte(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(EDGES[name].encode())
    literal = embedded(path)
    value = eval(literal, {"base64": base64})   # what the script holds: the source or its bytes
    assert (value.encode() if isinstance(value, str) else value) == path.read_bytes()
    assert not ACTING.search(literal)   # no control or bidi character raw in the script


@pytest.mark.parametrize("data", [b"\xef\xbb\xbfX = 1\n", "# -*- coding: latin-1 -*-\ns = '\xe9'\n".encode("latin-1")])
def test_a_source_that_is_not_plain_utf8_travels_as_its_bytes(tmp_path, data):
    path = tmp_path / "p.py"
    path.write_bytes(data)
    literal = embedded(path)
    assert literal.startswith("base64.b64decode(") and eval(literal, {"base64": base64}) == data
    namespace: dict = {}
    exec(compile(eval(literal, {"base64": base64}), "p.py", "exec"), namespace)   # Python decodes it as the file


def _commit(sha: str, env: dict) -> Point:
    return Point(ref=sha[:12], kind="commit", sha=sha, env=env, pins=["numpy==1.26.4"], value=1.0)


def _result(repo_url, env) -> BisectResult:
    return BisectResult(run_id="r1", package="acc", mode="commit", status="found", reason="found", criterion="m > 1",
                        metric="m", threshold=1.0, last_good=_commit("a" * 40, env), first_bad=_commit("b" * 40, env),
                        repo_url=repo_url, command="bisector run --repo /src/clones/acc --good a --bad b")


ENV = {"python": "3.11.7", "torch": "2.13.0+cpu", "torch from": "bisector's interpreter (/opt/py/bin/python3)",
       "numpy": "1.26.4", "acc": "0.28.0.dev0", "weird": "as of the candidate"}


@pytest.mark.parametrize("url", ["https://github.com/o/acc", "https://github.com/o/acc.git", "https://github.com/o/acc/"])
def test_the_header_installs_only_requirements_with_one_git_suffix(url):
    s = _result(url, ENV)
    reqs = installs(s, s.last_good, None)
    assert reqs == ["torch==2.13.0", "git+https://github.com/o/acc.git@" + "a" * 40, "numpy==1.26.4"]
    head = "\n".join(header(s, "r.py", "exit 0", None))
    assert "torch from==" not in head and "/opt/py" not in head and ".git.git" not in head and "weird==" not in head
    assert "(torch 2.13.0+cpu, pinned as its release; torch from: bisector's interpreter; weird: as of the candidate)" in head


def test_a_local_clone_is_a_placeholder_the_header_explains():
    s = _result(None, ENV)
    reqs = installs(s, s.first_bad, "/src/clones/acc")
    assert "git+${REPO_URL}@" + "b" * 40 in reqs
    head = "\n".join(header(s, "r.py", "exit 0", "/src/clones/acc"))
    assert "/src/clones" not in head and "export REPO_URL=file:///path/to/clone" in head
    assert '"git+${REPO_URL}@' + "b" * 40 + '"' in head and '--repo "$REPO_URL"' in head
    hostile = _result(None, {**ENV, "acc": "x"}).model_copy(update={"command": "bisector run --good 'a\u202e\x1b[2J'"})
    lines = header(hostile, "r.py", "exit 0", None)
    assert all(line.startswith("#") for line in lines) and not ACTING.search("\n".join(lines))


def test_a_probe_argument_cannot_open_the_issue_draft(tmp_path):
    payload = "x\n```\n<script>alert(1)</script>\n<img src=x onerror=alert(1)>\n```"
    config = MatrixConfig.model_validate({"matrix": {"grid": {"acc": ["1.0.0", "latest"], "tf": ["4.0"]}},
                                          "probe": {"name": "ga_memory", "args": ["--loop", payload]}})
    result = night(1, "1.5.0", 2.0, [step("1.5.0", 2.0)])
    [draft] = track([], result, CRIT)
    md = draft_text(draft, result, config, Store(tmp_path / "s.db"))
    tokens = MarkdownIt("commonmark").parse(md)
    html_tokens = [t.content for t in tokens if t.type == "html_block"]
    assert html_tokens == [f"<!-- bisector issue draft {draft.file}: grid g, updated by run run1 -->\n"]   # its own
    assert not [t for t in tokens if "html_inline" in [c.type for c in t.children or []]]
    html = MarkdownIt("commonmark").render(md)
    assert "<script" not in html and "<img" not in html and "&lt;script&gt;" in html
    [fence] = [t for t in tokens if t.type == "fence"]
    assert fence.info == "bash" and "$'--probe-arg=x\\n```\\n<script>" in fence.content and fence.content.count("\n") == 1


def test_a_write_replaces_a_link_and_never_touches_what_it_pointed_at(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    victim.chmod(0o600)
    link = tmp_path / "out.md"
    link.symlink_to(victim)
    write_atomic(link, "report\n")
    assert not link.is_symlink() and link.read_text() == "report\n"
    assert victim.read_text() == "keep\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    write_atomic(tmp_path / "r.py", "x", mode=0o755)
    assert stat.S_IMODE((tmp_path / "r.py").stat().st_mode) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.md", "r.py", "victim"]   # no temporary file left
    (tmp_path / "d").mkdir()
    with pytest.raises(IsADirectoryError):
        write_atomic(tmp_path / "d", "x")


def test_a_destination_that_is_no_regular_writable_file_is_refused(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    for name, said in (("dangling", "is a symlink"), ("dir", "is a directory"), ("fifo", "not a regular file"),
                       ("no/r.py", "no directory")):
        with pytest.raises(UsageError, match=said):
            check_output_file(tmp_path / name, "--repro")
    assert check_output_file(tmp_path / "new.py", "--repro") == tmp_path / "new.py"
    assert not (tmp_path / "new.py").exists() and not (tmp_path / "nowhere").exists()
    if os.geteuid() != 0:   # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(UsageError, match="not writable"):
            check_output_file(locked / "r.py", "--repro")


def test_the_matrix_summary_report_and_page_show_what_a_probe_said_without_acting():
    from bisector.matrix.grid_report import markdown as matrix_markdown, render_text as matrix_text
    from bisector.matrix.svg_chart import esc
    result = night(1, "1.5.0", 2.0, [step("1.5.0", 2.0)])
    result.notes.append("probe said \x1b]0;owned\x07\x1b[2J \u202eevil")
    for shown in (matrix_text(result, {}), matrix_markdown(result, {})):
        assert not ACTING.search(shown) and "\\x1b" in shown and "\\u202eevil" in shown
    assert esc("\u2066<b>\x1b") == "\\u2066&lt;b&gt;\\x1b"


@settings(max_examples=40, deadline=None)
@given(TEXT, TEXT, TEXT)
def test_a_bisect_report_quotes_any_subject_author_and_note_as_data(subject, author, note):
    from bisector.report.render import render_markdown
    from bisector.report.text import render_text
    points = [Point(ref=sha[:12], kind="commit", sha=sha, subject=subject, author=author, value=v,
                    link="javascript:alert(1)", env={"torch": "2.13.0"}) for sha, v in (("a" * 40, 1.0), ("b" * 40, 3.0))]
    result = BisectResult(run_id="r1", package="acc", mode="commit", status="found", reason=note, criterion="m > 2",
                          metric="m", threshold=2.0, last_good=points[0], first_bad=points[1], notes=[note],
                          command=f"bisector run --good {shell_join([note])}")
    text, md = render_text(result), render_markdown(result)
    assert not ACTING.search(text) and not ACTING.search(md)
    tokens = MarkdownIt("commonmark").parse(md)
    inline = [c for t in tokens for c in t.children or []]
    assert not [c for c in inline if c.type == "html_inline" and not re.fullmatch(r"</?(details|summary|pre)>", c.content)]
    assert not [c for c in inline if c.type == "link_open" and not c.attrs["href"].startswith(("http://", "https://"))]
    for block in (t.content for t in tokens if t.type == "html_block"):
        assert "<script" not in block.lower() and "<img" not in block.lower()


def test_runs_and_the_progress_lines_show_config_values_and_labels_without_acting(tmp_path, capsys):
    import io

    from bisector.cli.main import main
    from bisector.console.live import PlainProgress
    from bisector.store.storage import RunRow, now
    store = Store(tmp_path / "s.db")
    store.put_run(RunRow(id="r1", created=now(), updated=now(), kind="bisect", command=["bisector", "run"],
                         config={"job": {"package": "p\x1b]0;owned\x07", "good": "\u202e1.0", "bad": "2.0\n3"}},
                         status="running"))
    store.close()
    assert main(["runs", "--store", str(tmp_path / "s.db")]) == 0
    out = capsys.readouterr().out
    assert not ACTING.search(out) and "p\\x1b]0;owned\\x07 \\u202e1.0..2.0\\n3" in out and len(out.splitlines()) == 3
    stream = io.StringIO()
    PlainProgress(stream).print("  building tinypkg \x1b[2J\u2066x")
    assert stream.getvalue() == "  building tinypkg \\x1b[2J\\u2066x\n"


def test_no_probe_name_or_environment_value_ends_a_comment_or_the_docstring_of_the_repro(tmp_path):
    import ast

    from bisector.repro.compose import repro_script
    from bisector.job.config import JobConfig
    probe = tmp_path / 'p"""\nraise SystemExit(7)\n#\\.py'
    probe.write_text("import json, os\njson.dump({'metrics': {'m': 3.0}}, open(os.environ['BISECTOR_RESULT'], 'w'))\n")
    config = JobConfig.model_validate({"job": {"package": "acc", "good": "1.0", "bad": "2.0"},
                                       "probe": {"path": str(probe)}, "criterion": {"metric": "m", "threshold": 2}})
    env = {**ENV, "gpu": "H200\nraise SystemExit(8)\u202e", "python": "3.11\nimport os"}
    s = _result("https://github.com/o/acc", env).model_copy(update={"bisector_version": "0.1\nraise SystemExit(9)"})
    text = repro_script(s, config, "r.py").text
    tree = ast.parse(text)
    assert not [n for n in tree.body if isinstance(n, ast.Raise)] and not ACTING.search(text)
    assert [type(n).__name__ for n in tree.body[:2]] == ["Expr", "Import"]   # the docstring, then the imports


def test_matrix_reports_drafts_and_page_replace_planted_links(tmp_path):
    from bisector.matrix.draft_text import write_drafts
    from bisector.matrix.grid_report import write_reports
    from bisector.matrix.html import write_html
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    victim.chmod(0o600)
    out, page = tmp_path / "out", tmp_path / "page"
    for where in (out / "matrix.md", out / "matrix.json", out / "issues" / "acc-1.5.0-m.md", page / "index.html",
                  page / "matrix.md", page / "issues" / "acc-1.5.0-m.md"):
        where.parent.mkdir(parents=True, exist_ok=True)
        where.symlink_to(victim)
    config = MatrixConfig.model_validate({"matrix": {"grid": {"acc": ["1.0.0", "latest"], "tf": ["4.0"]}}})
    result = night(1, "1.5.0", 2.0, [step("1.5.0", 2.0)])
    result = result.model_copy(update={"issue_drafts": track([], result, CRIT), "metrics": []})   # (no plot: no matplotlib)
    drafts = write_drafts(result, config, Store(tmp_path / "s.db"), out / "issues")
    write_reports(result, out, out / "issues")
    write_html(result, page, out, drafts)
    assert victim.read_text() == "keep\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    written = [p for p in (*out.rglob("*"), *page.rglob("*")) if not p.is_dir()]
    assert written and not [p for p in written if p.is_symlink()] and "Version matrix" in (page / "index.html").read_text()


def test_an_error_line_is_one_short_line_with_nothing_acting():
    from bisector.safety.safe_text import error_line
    assert error_line("'1.0\u202e' is not a valid version") == "'1.0\\u202e' is not a valid version"
    line = error_line("argument --mode: invalid choice: '" + "a" * 100_000 + "' (choose from 'auto')")
    assert line.endswith("...(100002 chars) (choose from 'auto')") and len(line) < 200
    assert error_line("x: '" + "b" * 59 + "...(100050 chars)") == "x: '" + "b" * 59 + "...(100050 chars)"   # cut once
    path = "/tmp/pytest-of-someone/pytest-12/test_a_destination_that_is0/no/such/dir/r.py"
    assert error_line(f"--repro {path}: no directory") == f"--repro {path}: no directory"   # a path stays whole
    assert len(error_line("a " * 100_000)) < 1100 and "\n" not in error_line("a\nb")


def test_a_vcs_url_pip_takes_and_no_path_of_this_machine_in_the_bisect_s_command():
    from bisector.repro.header import index_use, portable, requirement, vcs_url
    assert vcs_url("git@github.com:o/x.git") == "ssh://git@github.com/o/x.git"
    assert vcs_url("git@github.com:o/x") == "ssh://git@github.com/o/x.git"
    assert vcs_url("ssh://git@host/o/x.git") == "ssh://git@host/o/x.git" and vcs_url("https://h/o/x/") == "https://h/o/x.git"
    p = _commit("b" * 40, ENV)
    assert requirement("acc", p, None, "git@github.com:o/acc") == "git+ssh://git@github.com/o/acc.git@" + "b" * 40
    command = ("bisector run --package acc --env /home/alice/specs/plain.toml --probe /home/alice/probe.py "
               "--probe-cmd 'sh /home/alice/x.sh' --config=~/bisect.toml --repo /src/acc --index-url https://h/simple")
    shown = portable(shlex.split(command), "/src/acc", "https://github.com/o/acc")
    assert "/home/alice" not in shown and "/src/acc" not in shown and "~" not in shown
    assert "--env '<PATH>' --probe '<PATH>' --probe-cmd 'sh <PATH>' '--config=<PATH>'" in shown
    assert "--repo https://github.com/o/acc --index-url https://h/simple" in shown
    assert '--repo "$REPO_URL"' in portable(shlex.split(command), "/src/acc")
    used = index_use("https://u:secret@h/simple", ["file:///opt/pypi/simple", "https://extra/simple"])
    assert used.pip_args() == ["--index-url", "https://u:secret@h/simple", "--extra-index-url", "https://extra/simple"]
    assert used.left_out == 1   # a file:// index is this machine's (the written script redacts the credentials)
