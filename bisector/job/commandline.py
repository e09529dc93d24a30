"""Rewrite a recorded command line: the 'refine with' / 'widen with' hints and the reproduce command."""
from __future__ import annotations

import shlex
from typing import Optional

from bisector.redact import redact_text

VALUE_FLAGS = {"--good", "--bad", "--mode", "--repo", "--package", "--config", "--store", "--cache-dir"}
_LOCAL_FLAGS = {"--store": True, "--cache-dir": True, "--json": False}   # flag -> takes a value


def with_flags(command: list[str], updates: dict[str, Optional[str]], drop: dict[str, bool] | None = None) -> str:
    """``command`` with each flag in ``updates`` replaced (value None = a switch with no value), and each
    flag in ``drop`` (flag -> whether it takes a value) removed.

    Both ``--flag value`` and ``--flag=value`` spellings of a replaced flag are removed first.
    """
    out: list[str] = []
    skip = False
    drop = drop or {}
    for word in command:
        if skip:
            skip = False
            continue
        name = word.split("=", 1)[0]
        if name in updates or name in drop:
            takes = drop[name] if name in drop else name in VALUE_FLAGS or updates[name] is not None
            skip = "=" not in word and takes
            continue
        out.append(word)
    for flag, value in updates.items():
        out += [flag] if value is None else [flag, value]
    return shlex.join(out)


def reproduce_command(command: Optional[str]) -> Optional[str]:
    """The run's command without machine-local flags (--store, --cache-dir, --json), credentials redacted."""
    if not command:
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return redact_text(command)
    out, skip = [], False
    for word in words:
        flag = word.split("=", 1)[0]
        if skip:
            skip = False
        elif flag in _LOCAL_FLAGS:
            skip = _LOCAL_FLAGS[flag] and "=" not in word
        else:
            out.append(redact_text(word))
    return shlex.join(out)
