"""Secrets masked in a user's file that a repro carries (bisector.redact's one pass, used so the file still runs).

A text file is masked as a whole (``redact_text``). Python source is masked where a secret can be: in its string
literals and comments, each read with the code before it on its line (``password = "hunter2"`` is masked,
``"***"`` stays a string), never in its code, where the pass would take ``tokenizer.pad_token =
tokenizer.eos_token`` for a token and break the program. What comes out must still parse where the original
did; when it cannot be masked that way, :func:`masked` says None (the file is not carried).
"""
from __future__ import annotations

import ast
import io
import tokenize
from typing import Optional

from bisector.redact import redact_text

_MASKED_TOKENS = {tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def _masked_python(text: str) -> Optional[str]:
    """``text`` with its string literals and comments masked; None when it does not tokenize."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    starts = [0]
    for line in io.StringIO(text).readlines():
        starts.append(starts[-1] + len(line))
    edits = []
    for tok in tokens:
        if tok.type not in _MASKED_TOKENS or not tok.string:
            continue
        line_start = starts[tok.start[0] - 1]
        start, end = line_start + tok.start[1], starts[tok.end[0] - 1] + tok.end[1]
        before, piece = text[line_start:start], text[start:end]
        shown = redact_text(before + piece)
        new = shown[len(before):] if shown.startswith(before) else redact_text(piece)
        if new != piece:
            edits.append((start, end, new))
    for start, end, new in reversed(edits):
        text = text[:start] + new + text[end:]
    return text


def masked(text: str, python: bool) -> Optional[str]:
    """``text`` without secrets (see the module); None when Python source cannot be masked and still parse."""
    if not python:
        return redact_text(text)
    shown = _masked_python(text)
    if shown is None:   # (not Python that tokenizes: masked as text)
        return redact_text(text)
    return shown if shown == text or _parses(shown) or not _parses(text) else None
