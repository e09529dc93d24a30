"""Issue 47, items 1 and 2: the user's command words (after ``--``) are data everywhere they are written, and
their secrets are masked before anything is written or stored.

* one encoder per output kind (bisector.safety.safe_text.command_as: terminal and shell, markdown, HTML,
  JSON), asserted of arbitrary words (hypothesis: quotes, triple quotes, backslashes, newlines, NUL, lone
  surrogates, bidi, ESC drawn often): a terminal line stays one line with nothing acting and bash reads it
  back word for word; markdown is one code span; HTML has no tag; JSON is strict and gives the words back;
* every renderer that writes a command (the text and markdown reports, the JSON report, ``log``, an issue
  draft) keeps a newline in a word from starting a line, and ``report --format json`` stays strict JSON;
* secrets (``--password hunter2``, ``--hub_token=...``, any case, ``_`` or ``-``; ``hf_``, ``sk-``,
  ``ghp_``, AWS key ids anywhere; ``user:password@`` in a URL) are masked word by word, and neither the store
  (its SQL dump) nor a JSON document keeps one; the data pass keeps JSON valid whatever its strings hold.
"""
from __future__ import annotations

import html
import json
import re
import sqlite3
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st
from markdown_it import MarkdownIt

from bisector.cli.run_kinds import log_text
from bisector.core.result import BisectResult
from bisector.difference.diff_model import DiffResult, Setup
from bisector.difference.diff_report import render_diff_text
from bisector.job.commandline import joined, shown_command
from bisector.job.config import JobConfig
from bisector.matrix.draft_text import text as draft_text
from bisector.matrix.grid_config import MatrixConfig
from bisector.matrix.issue_drafts import track
from bisector.redact import MASK, mask_words, redact_data, redact_output
from bisector.report.render import render_json, render_markdown
from bisector.report.text import render_text
from bisector.safety.safe_text import command_as
from bisector.store.storage import RunKind, RunRow, Store, now
from tests.unit.test_matrix_drafts import CRIT, night, step
from tests.unit.test_safe_text import ACTING

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NASTY = ["'", '"', '"""', "'''", "\\", "\n", "\r", "\x00", "\ud800", "\udcff", "\u202e", "\u2066", "\x1b[2J",
         "\x1b]0;t\x07", "`", "```", "$(id)", "<script>", "\t", "\x85", " "]
WORD = st.lists(st.one_of(st.characters(), st.sampled_from(NASTY)), max_size=8).map("".join)
WORDS = st.lists(WORD, min_size=1, max_size=6)
FORGED = "step  9 releases  6.6.6  BAD  FORGED"
HOSTILE = ["a\n" + FORGED, '"""', "x\\", "\x1b[2J", "\u202eevil", "it's", "\x00", "\udcff"]

# every secret kind of the battery: (the words as typed, the secret that must never come out)
SECRETS = [(["--password", "hunter2"], "hunter2"), (["--PASSWORD", "1234567"], "1234567"),
           (["--hub-token", "tok3nValue"], "tok3nValue"), (["--hub_token", "hf_short"], "hf_short"),
           (["--wandb_key=wandbsecret1"], "wandbsecret1"), (["--Api-Key", "k3yvalue"], "k3yvalue"),
           (["--db_passwd", "pw0rdz"], "pw0rdz"), (["--client-secret=s3cr3tz"], "s3cr3tz"),
           (["--basic_auth", "user:pw99"], "user:pw99"), (["--aws-credentials", "credz77"], "credz77"),
           (["hf_" + "A" * 30], "A" * 30), (["sk-proj-" + "b" * 30], "b" * 30), (["ghp_" + "C" * 36], "C" * 36),
           (["AKIA" + "D" * 16], "D" * 16), (["https://bob:urlpw77@example.com/x"], "urlpw77"),
           (["--config=https://amy:cfgpw88@h.example/x"], "cfgpw88"), (["HF_TOKEN=envtok99"], "envtok99")]
COMMAND = [w for words, _ in SECRETS for w in words]
BATTERY = ([f"secrets: {' '.join(words)[:40]} in a command" for words, _ in SECRETS]   # counted by test_hostile.py
           + ["command words: one encoder per output kind keeps every word data",
              "command words: bash reads the terminal line back word for word",
              "command words: no renderer lets a word start a line or act (text, markdown, JSON, diff)",
              "command words: the log of a bisect, a matrix and a probe run writes the command on its one line",
              "command words: an issue draft writes the command as data, its secrets masked",
              "secrets: the store's SQL dump holds only masked words",
              "secrets: a JSON document stays JSON through the redaction pass"])


def _result(words: list[str]) -> BisectResult:
    return BisectResult(run_id="r1", package="acc", mode="release", status="found", reason="found", criterion="m > 1",
                        metric="m", threshold=1.0, command=["bisector", "run", "--", *words],
                        refine_command=["bisector", "run", "--mode", "auto", "--", *words])


def _no_forged_line(text: str, words: list[str]) -> None:
    assert not ACTING.search(text), ACTING.findall(text)
    assert not any(line.lstrip().startswith("step  9") for line in text.splitlines()), text


# -- the encoders ---------------------------------------------------------------------------------------------
@SETTINGS
@example(HOSTILE)
@given(WORDS)
def test_each_output_kind_keeps_every_word_data(words):
    line = command_as(words, "terminal")
    assert line == command_as(words, "shell") and "\n" not in line and not ACTING.search(line)
    span = command_as(words, "markdown")
    tokens = MarkdownIt("commonmark").parse(span)
    inline = [t for t in tokens if t.type == "inline"]
    assert len(inline) == 1 and [c.type for c in inline[0].children] == ["code_inline"], span
    assert not ACTING.search(span)

    class Tags(HTMLParser):
        found: list = []

        def handle_starttag(self, tag, attrs):
            self.found.append(tag)

    page = command_as(words, "html")
    tags = Tags()
    tags.feed(f"<p>{page}</p>")
    assert tags.found == ["p"] and html.unescape(page) == line and not ACTING.search(page)
    text = command_as(words, "json")
    # (the words back, as JSON reads any escapes: two lone surrogates that make a pair are read as the pair)
    assert json.loads(text) == json.loads(json.dumps(words)) and not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e]", text)


def test_bash_reads_the_terminal_line_back_word_for_word():
    import subprocess

    words = ["a\n" + FORGED, '"""', "x\\", "\x1b[2J", "\u202eevil", "it's", "", "$(touch pwned)", "`id`"]
    ran = subprocess.run(["bash", "-c", command_as(["printf", "%s\\0", *words])], capture_output=True, timeout=10)
    assert ran.stdout.decode().split("\0")[:-1] == words


# -- the renderers --------------------------------------------------------------------------------------------
@SETTINGS
@example(HOSTILE)
@given(WORDS)
def test_no_renderer_lets_a_command_word_start_a_line_or_act(words):
    result = _result(words)
    _no_forged_line(render_text(result, notes_shown=True), words)
    _no_forged_line(render_markdown(result), words)
    text = render_json(result)
    data = json.loads(text)   # strict: no control character raw in a string
    assert not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e]", text.replace("\n", ""))
    assert data["command"].startswith("bisector run --")
    assert shown_command(["bisector", "run", "--", *words]).count("\n") == 0
    follow = joined(["bisector", "run", "--", *words])   # a diff's command and its offered bisect (diff_run)
    diff = DiffResult(run_id="d1", status="found", reason="r", package="acc", version="1.0", criterion="m > 1",
                      a=Setup(), b=Setup(), command=follow, follow_command=follow)
    _no_forged_line(render_diff_text(diff), words)


@SETTINGS
@example(HOSTILE)
@given(WORDS)
def test_the_log_writes_the_command_on_its_one_line(tmp_path_factory, words):
    """``bisector log`` of a bisect, a matrix run and a probe run: the command is its one ``# command:`` line."""
    store = Store(tmp_path_factory.mktemp("log") / "s.db")
    for kind in (RunKind.BISECT, RunKind.MATRIX, RunKind.PROBE):
        store.put_run(RunRow(id=f"r{kind}", created=now(), updated=now(), kind=kind,
                             command=["bisector", str(kind), "--", *words],
                             config={"job": {"package": "acc", "good": "1", "bad": "2"}}, status="running"))
        log = log_text(store, store.get_run(f"r{kind}"))
        _no_forged_line(log, words)
        assert [line for line in log.splitlines() if line.startswith("# command: ")] == [log.splitlines()[1]], log
        assert len(log.splitlines()) == (4 if kind is RunKind.PROBE else 3), log
    store.close()


@SETTINGS
@example([w for w in HOSTILE if w not in ("\x00", "\udcff")] + ["--hub_token", "hf_abc"])
@given(st.lists(WORD.map(lambda w: re.sub("[\x00\ud800-\udfff]", "", w)), min_size=1, max_size=5))
def test_an_issue_draft_writes_the_command_as_data_with_its_secrets_masked(tmp_path_factory, words):
    result = night(1, "1.5.0", 2.0, [step("1.5.0", 2.0)])
    result = result.model_copy(update={"issue_drafts": track([], result, CRIT)})
    config = MatrixConfig.model_validate({"matrix": {"grid": {"acc": ["1.0.0", "latest"]}},
                                          "probe": {"command": ["python", "train.py", *words]},
                                          "criterion": {"max_increase": "20%"}})
    draft = draft_text(result.issue_drafts[0], result, config, Store(tmp_path_factory.mktemp("d") / "s.db"))
    _no_forged_line(draft, words)
    assert "hf_abc" not in draft


# -- the secrets ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("words,secret", SECRETS, ids=lambda v: v if isinstance(v, str) else " ".join(v)[:30])
def test_each_secret_kind_is_masked_word_by_word(words, secret):
    masked = mask_words(["python", "train.py", *words, "--lr", "0.1"])
    assert secret not in " ".join(masked) and MASK in " ".join(masked)
    assert masked[:2] == ["python", "train.py"] and masked[-2:] == ["--lr", "0.1"]   # the rest as it was
    assert mask_words(masked) == masked


def test_words_that_only_look_near_a_secret_are_kept():
    words = ["--tokenizer", "gpt2", "--max_tokens", "5", "--monkey", "banana", "--use_auth_token", "--model", "m"]
    assert mask_words(words) == words


def test_the_store_keeps_only_masked_words(tmp_path):
    config = JobConfig.model_validate({"job": {"package": "acc", "good": "1.0", "bad": "2.0"},
                                       "probe": {"command": ["python", "train.py", *COMMAND]},
                                       "criterion": {"metric": "step_peak_bytes", "max_increase": "5%"}})
    store = Store(tmp_path / "s.db")
    store.put_run(RunRow(id="r1", created=now(), updated=now(), kind=RunKind.BISECT, status="found",
                         command=["bisector", "run", "--", "python", "train.py", *COMMAND],
                         config=config.model_dump(mode="json"), result=json.loads(render_json(_result(COMMAND)))))
    store.close()
    dump = "\n".join(sqlite3.connect(tmp_path / "s.db").iterdump())
    for _, secret in SECRETS:
        assert secret not in dump, secret
    assert "python" in dump and "train.py" in dump


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.booleans() | WORD | st.sampled_from(COMMAND + ["Authorization:\"",
                                                                                                 "token\\", "--password"]),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(WORD, kids, max_size=3), max_leaves=10))
def test_a_json_document_stays_json_through_the_redaction_pass(value):
    text = json.dumps(value, indent=2)
    out = redact_output(text)
    assert json.loads(out) == json.loads(json.dumps(redact_data(value))) and redact_output(out) == out
