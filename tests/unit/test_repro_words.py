"""Issue 47: the user's command is data in the repro. For words drawn with the characters that break out of
Python source (quotes, triple quotes, backslashes, newlines, NUL, lone surrogates, bidi controls, ESC), every
kind of repro script parses, its code is its template's whatever the words (the same statements as with
plain words: a word can only be a literal's value), every setting is a pure literal that reads back as the
words, and no line of it holds a character that acts (nor, on its first two lines, an encoding declaration)."""
from __future__ import annotations

import ast
import re
import shlex
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
import pytest

from bisector.core.points import Point
from bisector.core.result import BisectResult
from bisector.job.config import JobConfig
from bisector.redact import redact_text
from bisector.repro.probe_view import Kind
from bisector.repro.compose import repro_script
from tests.unit.test_safe_text import ACTING

BREAKING = ['"""', "'''", '"', "'", "\\", "\\'", "\n", "\r", "\r\n", "\x00", "\ud800", "\udcff", "\u202e", "\u2066",
            "\u2028", "\ufeff", "\x1b", "\x1b[2J", "\x1b]0;x\x07", "\t", "#", "{", "}", "{0}", "%s", "\x0c",
            "raise SystemExit(7)", "__import__('os').system('echo PWNED')", "# -*- coding: utf-7 -*-", "+AAo-", "--"]
WORD = st.lists(st.one_of(st.sampled_from(BREAKING), st.characters(), st.characters(min_codepoint=0xD800,
                                                                                      max_codepoint=0xDFFF)),
                max_size=12).map("".join)
WORDS = st.lists(WORD, min_size=1, max_size=4)
SETTINGS = {"ARGS", "DEVICE", "METRIC", "THRESHOLD", "DIRECTION", "BISECT_SETTINGS", "COMMAND", "METER_ARGS", "ENV",
            "CARRIED", "NOT_CARRIED", "CRASH_IS_BAD", "PROBE_NAME", "MODULES", "PROBE", "UNITS", "DECLARED_UNITS", "FILES"}
COOKIE = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.ASCII)   # PEP 263, as the tokenizer reads it
GA_CONFIG = {"loop": "accelerate", "sizes": [64, 128], "device": "cpu"}
_PLAIN: dict[int, dict] = {}   # the code of each kind's script with plain words, by their number


def _result(metric: str, command: list[str]) -> BisectResult:
    env = {"python": "3.11.7", "torch": "2.13.0+cpu", "acc": "x"}
    sides = [Point(ref=v, kind="release", value=x, env={**env, "acc": v}, pins=[f"acc=={v}"])
             for v, x in (("1.3.0", 100.0), ("1.4.0", 400.0))]
    return BisectResult(run_id="r1", package="acc", mode="release", status="found", reason="found",
                        criterion=f"{metric} > 200", metric=metric, threshold=200.0, last_good=sides[0],
                        first_bad=sides[1], probe={"probe": "p", "config": GA_CONFIG},
                        command=["bisector", "run", "--package", "acc", "--", *command])


def _scripts(words: list[str], tmp: Path) -> dict[Kind, str]:
    """The script of every kind, each with ``words`` where the user's words go (the job's without NUL, which a
    job refuses and no argv can hold; the bisect's own command line, in the header, with it)."""
    shown = words
    refused = [w for w in words if "\0" in w or any("\ud800" <= c <= "\udfff" for c in w)]
    if refused:   # a job refuses NUL (no argv can hold it) and a lone surrogate (no UTF-8 text can)
        with pytest.raises(ValueError, match="NUL|not UTF-8"):
            JobConfig.model_validate({"job": {"package": "acc", "good": "1.0", "bad": "2.0"},
                                      "probe": {"command": words}})
        words = ["".join(c for c in w if c != "\0" and not "\ud800" <= c <= "\udfff") for w in words]
    probe = tmp / "p.py"
    probe.write_text("import json, os\njson.dump({'metrics': {'m': 3.0}}, open(os.environ['BISECTOR_RESULT'], 'w'))\n")
    job = {"package": "acc", "good": "1.0", "bad": "2.0"}
    probes = {Kind.COMMAND: ({"command": words, "cwd": str(tmp)}, "step_peak_bytes"),
              Kind.EXIT_CODE: ({"cmd": shlex.join(words)}, None),
              Kind.PROBE: ({"path": str(probe), "args": words}, "m"),
              Kind.GA_MEMORY: ({"name": "ga_memory", "args": words}, "ga_excess_bytes_per_param")}
    out = {}
    for kind, (spec, metric) in probes.items():
        config = JobConfig.model_validate({"job": job, "probe": spec, **({"criterion": {"metric": metric, "threshold": 200}}
                                                                         if metric else {})})
        result = _result(metric or "m", shown)
        if metric is None:
            result = result.model_copy(update={"metric": None, "threshold": None})
        out[kind] = repro_script(result, config, "repro.py").text
    return out


def _pure(node: ast.AST) -> bool:
    """A literal (what ``ast.literal_eval`` reads), or ``base64.b64decode('...')`` of one (an embedded file's bytes)."""
    if isinstance(node, ast.Call):
        f = node.func
        return (isinstance(f, ast.Attribute) and f.attr == "b64decode" and isinstance(f.value, ast.Name)
                and f.value.id == "base64" and len(node.args) == 1 and not node.keywords and _pure(node.args[0]))
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(map(_pure, node.elts))
    if isinstance(node, ast.Dict):
        return all(k is not None and _pure(k) for k in node.keys) and all(map(_pure, node.values))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _pure(node.operand)
    return isinstance(node, ast.Constant)


def _names(stmt: ast.stmt) -> set[str]:
    if not isinstance(stmt, ast.Assign):
        return set()
    return {n.id for t in stmt.targets for n in ([t] if isinstance(t, ast.Name) else getattr(t, "elts", []))
            if isinstance(n, ast.Name)}


def _split(text: str) -> tuple[list[str], dict[str, ast.expr]]:
    """(each statement of the template's code, dumped; each setting's value)."""
    code, values = [], {}
    for stmt in ast.parse(text).body:
        names = _names(stmt)
        if names and names <= SETTINGS:
            assert _pure(stmt.value), ast.unparse(stmt)[:300]
            value = ast.literal_eval(stmt.value) if len(names) == 1 or not isinstance(stmt.value, ast.Tuple) else None
            for i, t in enumerate(stmt.targets[0].elts if isinstance(stmt.targets[0], ast.Tuple) else stmt.targets):
                values[t.id] = stmt.value.elts[i] if value is None else stmt.value
        else:
            code.append(ast.dump(stmt))
    return code, values


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(['x"""; __import__("os").system("echo PWNED"); """'])
@example(["python", "-c", '"""\nraise SystemExit(7)\n"""', "a'''\n#", "\x00\ud800\u202e\x1b[2J"])
@given(WORDS)
def test_no_command_word_can_execute_in_any_repro(words):
    with tempfile.TemporaryDirectory() as tmp:
        hostile = _scripts(words, Path(tmp))
        if len(words) not in _PLAIN:
            _PLAIN[len(words)] = {k: _split(v)[0] for k, v in _scripts(["x"] * len(words), Path(tmp)).items()}
    plain = _PLAIN[len(words)]
    kept = ["".join(c for c in w if c != "\0" and not "\ud800" <= c <= "\udfff") for w in words]
    masked = [redact_text(w, home=False) for w in kept]
    for kind, text in hostile.items():
        text.encode("utf-8")   # (a lone surrogate cannot be written: every one is an escape)
        assert not ACTING.search(text), (kind, ACTING.findall(text))
        assert not any(COOKIE.match(line) for line in text.splitlines()[:2]), text.splitlines()[:2]
        head = text.split('"""', 1)[0].splitlines()
        assert head[0] == "#!/usr/bin/env python3" and all(line.startswith("#") for line in head if line)
        code, values = _split(text)
        assert code == plain[kind], kind   # the template's code, whatever the words
        if kind in (Kind.COMMAND, Kind.EXIT_CODE):
            assert ast.literal_eval(values["COMMAND"]) == masked   # the words, as data, every one whole
        else:
            assert ast.literal_eval(values["ARGS"]) == masked


def test_the_check_sees_a_word_that_breaks_out():
    """The rule can fail: the docstring the command repro had before (the words inside it) gives another
    statement for a word holding triple quotes."""
    words = ['x"""; __import__("os").system("echo PWNED"); """']
    with tempfile.TemporaryDirectory() as tmp:
        text = _scripts(words, Path(tmp))[Kind.COMMAND]
    old = text.replace('"""Runs the bisect\'s command', f'"""Runs {shlex.join(words)!r} the bisect\'s command', 1)
    assert _split(old)[0] != _split(text)[0]
