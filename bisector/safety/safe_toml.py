"""TOML read safely: refused by its shape before ``tomllib`` reads it.

``tomllib`` takes time quadratic in a dotted key's parts (100,000 parts: many minutes, then a
RecursionError), recurses once per level of nesting (50,000 levels: a RecursionError) and converts a
number of 5,000 digits into an int, which Python refuses past 4,300 digits (a ValueError, not a
TOMLDecodeError). :func:`shape_problem` scans the text once with one regular expression (strings and
comments skipped, so dots in values and digits in strings count for nothing) and names the first
thing no settings file holds: a key of more than :data:`MAX_DOTS` dotted parts (a ``[table]`` header,
a key, a key inside an inline table), arrays and inline tables nested more than :data:`MAX_DEPTH`
deep, a number of more than :data:`MAX_DIGITS` digits. :func:`loads` is ``tomllib.loads`` behind it:
a :class:`TomlShapeError` (a ``TOMLDecodeError``, so every reader's handler already takes it) instead
of minutes, a RecursionError or a ValueError. Every reader of TOML in bisector uses it: job files,
matrix files, env specs, the installer's configuration, a repository's ``pyproject.toml``.
"""
from __future__ import annotations

import re
import tomllib
from typing import Any, Optional

MAX_DOTS = 256    # dots in one key (a settings file's keys have a handful)
MAX_DEPTH = 64    # arrays and inline tables inside each other
MAX_DIGITS = 100  # digits (and underscores) in one number: a float's 17 significant digits are plenty

_TOKENS = re.compile(r'"""(?:[^\\]|\\[\s\S])*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"?|\'[^\'\n]*\'?|#[^\n]*'
                     r"|(?P<open>[\[{])|(?P<close>[\]}])|(?P<sep>[=,\n])|(?P<dot>\.)"
                     r"|(?P<number>[0-9][0-9_]{%d,})" % MAX_DIGITS)


class TomlShapeError(tomllib.TOMLDecodeError):
    """TOML refused by its shape (see the module)."""


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def shape_problem(text: str) -> Optional[str]:
    """What makes ``text`` no settings file by its shape (see the module), with its line; None: nothing."""
    depth, dots = 0, 0
    for m in _TOKENS.finditer(text):
        kind = m.lastgroup
        if kind == "dot":
            dots += 1
            if dots > MAX_DOTS:
                return f"line {_line(text, m.start())}: a key of more than {MAX_DOTS} dotted parts"
        elif kind == "open":
            depth, dots = depth + 1, 0
            if depth > MAX_DEPTH:
                return f"line {_line(text, m.start())}: arrays or tables nested more than {MAX_DEPTH} deep"
        elif kind == "close":
            depth, dots = max(depth - 1, 0), 0
        elif kind == "sep":
            dots = 0
        elif kind == "number":
            return f"line {_line(text, m.start())}: a number of more than {MAX_DIGITS} digits"
    return None


def loads(text: str) -> dict[str, Any]:
    """``tomllib.loads(text)``, refused first by :func:`shape_problem` (a TomlShapeError); a RecursionError
    or a ValueError of tomllib's (what the shape check leaves to it) as a TOMLDecodeError too."""
    problem = shape_problem(text)
    if problem:
        raise TomlShapeError(problem)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        raise
    except (RecursionError, ValueError) as exc:
        raise TomlShapeError("nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]) from None
