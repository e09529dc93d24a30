"""Command lines as words: a recorded command rewritten for what bisector offers to run next (refine,
widen, a followed bisect), and any command as a report shows it. A command is a list of words from the
moment it is recorded (``sys.argv``) to the moment it is shown; it is joined once, where it is written,
by the encoder of that output (bisector.safety.safe_text.command_as: one line in a terminal, a log or a
shell; a code span in markdown; escaped in HTML; a list in JSON), its secrets masked first
(bisector.redact.mask_words), and never split again."""
from __future__ import annotations

from typing import Optional

from bisector.redact import mask_words
from bisector.safety.safe_text import command_as

VALUE_FLAGS = {"--good", "--bad", "--mode", "--repo", "--package", "--config", "--store", "--cache-dir"}
_LOCAL_FLAGS = {"--store": True, "--cache-dir": True, "--json": False}   # flag -> takes a value


def with_words(command: list[str], updates: dict[str, Optional[str]],
               drop: Optional[dict[str, bool]] = None) -> list[str]:
    """``command`` with each flag in ``updates`` replaced (value None = a switch with no value), and each
    flag in ``drop`` (flag -> whether it takes a value) removed.

    Both ``--flag value`` and ``--flag=value`` spellings of a replaced flag are removed first. A user's program
    (the words after the first ``--``) is its own: never rewritten, and the flags go before it.
    """
    command, program = _split(command)
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
    return out + program


def _split(command: list[str]) -> tuple[list[str], list[str]]:
    """bisector's own words, and ``--`` with the user's program after it (empty without one)."""
    if "--" not in command:
        return list(command), []
    cut = command.index("--")
    return list(command[:cut]), list(command[cut:])


def portable_words(command: Optional[list[str]]) -> Optional[list[str]]:
    """The command without machine-local flags (--store, --cache-dir, --json), its secrets masked: what
    another machine runs."""
    if not command:
        return None
    own, program = _split(command)
    out, skip = [], False
    for word in own:
        flag = word.split("=", 1)[0]
        if skip:
            skip = False
        elif flag in _LOCAL_FLAGS:
            skip = _LOCAL_FLAGS[flag] and "=" not in word
        else:
            out.append(word)
    return mask_words(out + program)   # the program's own --json is the program's; its secrets are masked too


def shown_command(command: Optional[list[str]], kind: str = "terminal") -> Optional[str]:
    """The command as a report shows it: :func:`portable_words`, encoded for ``kind`` (terminal, markdown,
    html, json)."""
    words = portable_words(command)
    return command_as(words, kind) if words is not None else None


def joined(command: Optional[list[str]], kind: str = "terminal") -> Optional[str]:
    """The command as this machine runs it again (every flag kept, secrets masked), encoded for ``kind``."""
    return command_as(mask_words(command), kind) if command is not None else None

