"""Probe settings as a diff compares them: arguments as flag -> value, and a probe's loop as the
knobs it implies.

A probe that reports its effective settings (``knobs`` in its result: ga_memory's ``{"loop": ...,
"zero_grad_target": ..., "implied_by_loop": [...]}``) lets a difference of ``--loop`` be searched knob by
knob: each knob that differs between the two sides' loops is one change, set on the starting side's
loop as ``--<knob-with-dashes>=<value>``. Whether that is sound is measured (the engine's reproduction
check); when it is not, ``--loop`` stays one change: the loop itself.
"""
from __future__ import annotations

import re
from typing import Any, Optional

from bisector.core.changes import Change, ChangeKind

LOOP_FLAG = "--loop"
_NUMBER = re.compile(r"^-?\d*\.?\d+(e[+-]?\d+)?$", re.IGNORECASE)
_NOT_KNOBS = ("loop", "implied_by_loop")


def _is_flag(token: str) -> bool:
    return token.startswith("-") and not _NUMBER.match(token)


def parse_args(args: list[str]) -> dict[str, str]:
    """Probe arguments as an ordered flag -> value map ("" for a bare switch; ``--x=v`` and ``--x v``
    alike); words that follow no flag are kept, in order, under the key "" (one value)."""
    out: dict[str, str] = {}
    loose: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if not _is_flag(word):
            loose.append(word)
        elif "=" in word:
            flag, value = word.split("=", 1)
            out[flag] = value
        elif i + 1 < len(args) and not _is_flag(args[i + 1]):
            out[word], i = args[i + 1], i + 1
        else:
            out[word] = ""
        i += 1
    if loose:
        out[""] = " ".join(loose)
    return out


def render_args(flags: dict[str, str]) -> list[str]:
    """The argument list of a flag map (``--x=v``, a bare ``--x``, loose words as they were)."""
    words: list[str] = []
    for flag, value in flags.items():
        words += value.split(" ") if flag == "" else [flag] if value == "" else [f"{flag}={value}"]
    return words


def arg_changes(a: list[str], b: list[str]) -> list[Change]:
    """One change per flag whose value differs (None: absent on that side), in A's order then B's."""
    fa, fb = parse_args(a), parse_args(b)
    return [Change(kind=ChangeKind.ARG, name=flag or "(arguments)", a=fa.get(flag), b=fb.get(flag), flag=flag)
            for flag in dict.fromkeys([*fa, *fb]) if fa.get(flag) != fb.get(flag)]


def apply_args(args: list[str], changes: list[Change], to_b: bool) -> list[str]:
    """``args`` with each change set to the other side's value (removed when it has none there)."""
    flags = parse_args(args)
    for c in changes:
        value = c.b if to_b else c.a
        if value is None:
            flags.pop(c.flag, None)
        else:
            flags[c.flag] = value
    return render_args(flags)


def knob_flag(name: str) -> str:
    """'zero_grad_target' -> '--zero-grad-target' (how a knob is set on the probe's command line)."""
    return "--" + name.replace("_", "-")


def _value(v: Any) -> str:
    return "true" if v is True else "false" if v is False else str(v)


def expand_loop(changes: list[Change], a_knobs: Optional[dict], b_knobs: Optional[dict]) -> Optional[list[Change]]:
    """The changes with a differing ``--loop`` replaced by the knobs that differ between the two loops
    (and flags naming those knobs folded into them), or None when there is nothing to expand."""
    loop = next((c for c in changes if c.kind is ChangeKind.ARG and c.flag == LOOP_FLAG), None)
    if loop is None or not isinstance(a_knobs, dict) or not isinstance(b_knobs, dict):
        return None
    names = [k for k in dict.fromkeys([*a_knobs, *b_knobs]) if k not in _NOT_KNOBS]
    knobs = [Change(kind=ChangeKind.KNOB, name=k, a=_value(a_knobs.get(k)), b=_value(b_knobs.get(k)), flag=knob_flag(k))
             for k in names if a_knobs.get(k) != b_knobs.get(k)]
    folded = {knob_flag(k) for k in names} | {LOOP_FLAG}
    return [c for c in changes if not (c.kind is ChangeKind.ARG and c.flag in folded)] + knobs
