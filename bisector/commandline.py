"""Rewrite a recorded command line (for the 'refine with' / 'widen with' / reproduce hints)."""
from __future__ import annotations

import shlex
from typing import Optional

VALUE_FLAGS = {"--good", "--bad", "--mode", "--repo", "--package", "--config", "--store", "--cache-dir"}


def with_flags(command: list[str], updates: dict[str, Optional[str]]) -> str:
    """``command`` with each flag in ``updates`` replaced (value None = a switch with no value).

    Both ``--flag value`` and ``--flag=value`` spellings of a replaced flag are removed first.
    """
    out: list[str] = []
    skip = False
    for word in command:
        if skip:
            skip = False
            continue
        name = word.split("=", 1)[0]
        if name in updates:
            skip = "=" not in word and (name in VALUE_FLAGS or updates[name] is not None)
            continue
        out.append(word)
    for flag, value in updates.items():
        out += [flag] if value is None else [flag, value]
    return shlex.join(out)
