"""The one template style of the repro scripts: each kind's script is a data file, a real Python script
(bisector/data/repro/<kind>_repro.py), with marked parts

    # >>> name
    (what stands there in the template)
    # <<<

that :func:`fill` replaces with lines of two sorts only: comment lines, each on one line (a newline or a
control character in a value is shown as an escape: bisector.safety.safe_text.one_line, so no value ends a
comment), and assignments of Python literals written by :func:`assign` (``repr``, checked to read back as the
value: a word of the user's command is data, never code, whatever it holds, and is never put into a
docstring or an f-string). Every other line of a script is its template's, the same for every run.

Two parts are the same in every kind and filled here: ``common`` (the functions every script shares,
common_repro.py: its arguments, a one-line error, the judge) and ``units`` (bisector's own unit formatting,
bisector/core/units.py, embedded byte for byte: a script prints every number as bisector's reports do).
"""
from __future__ import annotations

import ast
import pprint
import re
from pathlib import Path
from typing import Any

from bisector.core import units as units_module
from bisector.data import repro_dir
from bisector.redact import redact_text
from bisector.repro.embed import embedded
from bisector.safety.safe_text import one_line

_PART = re.compile(r"^# >>> (\w+)\n.*?^# <<<\n", re.M | re.S)
COMMON = "common_repro.py"
SHARED = ("common", "units")


def assign(name: str, value: Any, comment: str = "") -> str:
    """``NAME = <literal>`` (``repr``; a dict pretty-printed), with a one-line comment after it. ValueError when
    the literal would not read back as ``value`` (no value reaches a script as anything but data)."""
    names = [n.strip() for n in name.split(",")]
    if not all(n.isidentifier() for n in names):
        raise ValueError(f"not a name: {name!r}")
    if len(names) > 1:   # A, B = 1, 2
        if not isinstance(value, tuple) or len(value) != len(names):
            raise ValueError(f"{name}: {len(names)} values, got {value!r}")
        text = ", ".join(map(repr, value))
    else:
        text = pprint.pformat(value, width=110, sort_dicts=False) if isinstance(value, dict) and value else repr(value)
    if ast.literal_eval(f"({text})" if len(names) > 1 else text) != value:
        raise ValueError(f"{name}: {type(value).__name__} with no Python literal")
    return f"{name} = {text}" + (f"   # {one_line(comment)}" if comment else "")


def comments(lines: list[str]) -> list[str]:
    """Comment lines, each on one line and masked (bisector.redact; the user's home kept: a path is a path)."""
    out = []
    for line in lines:
        shown = one_line(redact_text(line, home=False))
        out.append(shown if shown.startswith("#") else f"# {shown}")
    return out


def _shared(name: str, declared: dict[str, str]) -> list[str]:
    if name == "common":
        return _PART.sub("", (repro_dir() / COMMON).read_text()).rstrip("\n").splitlines()
    return [f"UNITS = {embedded(Path(units_module.__file__))}   # bisector/core/units.py, as bisector formats numbers",
            assign("DECLARED_UNITS", dict(declared), "the units the bisect's probe declared")]


def fill(template: str, parts: dict[str, list[str]], declared: dict[str, str]) -> str:
    """The script of template ``template`` (a file of bisector/data/repro) with each marked part replaced by
    ``parts[name]`` (``common`` and ``units``: the shared ones, with the run's ``declared`` units). Every
    part the template marks must be given, and only those."""
    text = (repro_dir() / template).read_text()
    marked = _PART.findall(text)
    given = {**parts, **{name: _shared(name, declared) for name in SHARED if name in marked}}
    if sorted(marked) != sorted(given) or len(set(marked)) != len(marked):
        raise ValueError(f"{template} marks {sorted(marked)}, given {sorted(given)}")
    out = _PART.sub(lambda m: "\n".join(given[m[1]]) + "\n", text)
    ast.parse(out, template)   # (never a script that does not parse: a SyntaxError is bisector's own fault)
    return out
