"""Text from others is data: the one rule for what a terminal or a document may receive of it.

Commit subjects and authors, refs, probe reasons and stderr tails, config values and commands come
from outside bisector. Before any of it reaches a terminal, a text or markdown report, a log or an
issue draft, :func:`visible` makes every character that could act instead of being read visible as an
escape: C0 controls but newline and tab (ESC, BEL, CR, backspace, ...), DEL, C1 controls (U+0080-
U+009F, CSI among them), the bidi controls (U+061C, U+200E/U+200F, U+202A-U+202E, U+2066-U+2069) and
the invisible ones (U+200B, U+2028/U+2029, U+2060, U+FEFF), and lone surrogates (the undecodable bytes
of a path or an argument, which no UTF-8 file can hold). ``\\x1b`` is written ``\\x1b``, U+202E is
written ``\\u202e``, so the text says what it held; text without them is returned as it is (bisector's
own output is unchanged), and the function is idempotent.

:func:`one_line` also shows a newline (a command or a value shown on one line: no line can be faked),
:func:`json_visible` writes them as JSON escapes (the same data: ``json.loads`` gives the original
string back), :func:`shell_join` quotes a command on one line that a shell still reads back word for
word, and :func:`fenced` wraps text in a markdown code fence that nothing inside can close.

A command's words (the user's program after ``--`` among them) are data in every output: :func:`command_as`
is the one encoder per output kind (``shell`` and ``terminal``: :func:`shell_join`, one line; ``markdown``:
a code span of that line no backtick closes; ``html``: that line escaped; ``json``: the list of words, strict
JSON with nothing acting raw). Secrets are masked before (bisector.redact.mask_words).
"""
from __future__ import annotations

import html
import json
import re
import shlex
from typing import Callable, Iterable, Optional

from bisector.errors import SHOWN_CHARS, cut

_ACTING = ("\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2060\u2066-\u2069\ufeff"
           "\ud800-\udfff")   # lone surrogates: undecodable bytes of a path or argv (UTF-8 cannot write them)
_UNSAFE = re.compile(f"[{_ACTING}]")
_UNSAFE_LINE = re.compile(f"[{_ACTING}\n\t]")
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2060\u2066-\u2069\ufeff\ud800-\udfff]")
_LONG_WORD = re.compile(r"\S{%d,}" % (2 * SHOWN_CHARS + 40))   # a word an error echoes whole (a path) is shorter
ERROR_CHARS = 1000   # an error line longer than this (many short words of a value) is cut too
_SHORT = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _shown(match: re.Match) -> str:
    char = match[0]
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: Optional[str]) -> str:
    """``text`` with every control, bidi and invisible character shown as an escape (newlines and tabs
    kept); None as ''."""
    if not text:
        return text or ""
    text = str(text)
    return _UNSAFE.sub(_shown, text) if _UNSAFE.search(text) else text


def one_line(text: Optional[str]) -> str:
    """:func:`visible`, newlines and tabs shown too: the text on one line, whatever it held."""
    if not text:
        return text or ""
    text = str(text)
    return _UNSAFE_LINE.sub(_shown, text) if _UNSAFE_LINE.search(text) else text


def json_visible(text: str) -> str:
    """JSON text with the characters JSON leaves raw (DEL, C1, bidi, invisible) written as ``\\uXXXX``
    escapes: the same JSON value, nothing in it acts on a terminal (``json.dumps`` escapes the rest).
    Only valid where such a character can only be inside a string (any JSON that ``json.dumps`` wrote)."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m[0]):04x}", text) if _JSON_UNSAFE.search(text) else text


def fenced(text: str, info: str = "") -> list[str]:
    """``text`` as the lines of a markdown code block: its controls shown (:func:`visible`) and a fence
    of backticks longer than any run of backticks in it, so no line of it can close the block."""
    body = visible(text)
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + one_line(info).replace("`", ""), *body.splitlines(), fence]


def _ansi_c(word: str) -> str:
    """``word`` in bash's ``$'...'`` quoting: every control, bidi and invisible character as an escape."""
    body = word.replace("\\", "\\\\").replace("'", "\\'")

    def escape(m: re.Match) -> str:   # \xHH is a byte to bash: a character from U+0080 on is \uHHHH
        return _shown(m) if ord(m[0]) < 0x80 else f"\\u{ord(m[0]):04x}"

    return "$'" + _UNSAFE_LINE.sub(escape, body) + "'"


def shell_join(words: list[str]) -> str:
    """``shlex.join(words)`` on one line: a word holding a newline, a control or a bidi character is
    written in ``$'...'`` quoting (bash, zsh), which a shell reads back as exactly that word."""
    return " ".join(_ansi_c(w) if _UNSAFE_LINE.search(w) else shlex.quote(w) for w in words)


def code_span(text: Optional[str]) -> str:
    """``text`` (on one line: :func:`one_line`) as a markdown code span that no backtick in it can close (never
    the empty ``````, which would pair with the next backtick pair and free what lies between)."""
    flat = one_line(str(text or "")).strip()
    if not flat:
        return "` `"
    fence = "`" * (max((len(run) for run in re.findall(r"`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def json_words(words: Iterable[str]) -> str:
    """``words`` as a strict JSON array: every control written as an escape, lone surrogates too (``json.loads``
    gives the same words back)."""
    return json_visible(json.dumps([str(w) for w in words], ensure_ascii=False))


COMMAND_ENCODERS: dict[str, Callable[[list[str]], str]] = {
    "shell": shell_join,
    "terminal": shell_join,
    "markdown": lambda words: code_span(shell_join(words)),
    "html": lambda words: html.escape(shell_join(words), quote=True),
    "json": json_words,
}


def command_as(words: Iterable[str], kind: str = "terminal") -> str:
    """A command's words encoded for one kind of output (see the module): nothing a word holds (a quote, a
    newline, ESC, a bidi control, a backtick, markup) can end the command, start a line or act."""
    return COMMAND_ENCODERS[kind]([str(w) for w in words])


def _cut_word(match: re.Match) -> str:
    word = match[0]
    already = re.search(r"\.\.\.\((\d+)$", word)   # cut before ("...(N chars)"): N is the value's length
    return f"{word[:SHOWN_CHARS]}...({already[1]}" if already else cut(word)


def error_line(message: object) -> str:
    """An error message as the one line a terminal may show: every whitespace-free run longer than a
    path usually is (a value echoed from a flag or a file) cut to :data:`bisector.errors.SHOWN_CHARS`,
    the whole cut to :data:`ERROR_CHARS`, then :func:`one_line` (no control, bidi character or newline
    acts)."""
    text = str(message)
    text = _LONG_WORD.sub(_cut_word, text)
    return one_line(cut(text, ERROR_CHARS))
