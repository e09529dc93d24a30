"""A probe's files as a standalone script holds them: each source as a Python literal that reads back as it, byte
for byte (:func:`embedded`, :func:`literal`), and a built-in probe's files (its own, the contract, the meter
library modules it uses: bisector.repro.probe_view) as one ``FILES`` dict, relative path -> source, that the
script writes out and runs (:func:`files_dict`). The ga_memory and command repros run the probe's own code this
way, never a copy."""
from __future__ import annotations

import ast
import base64
from pathlib import Path

from bisector.safety.safe_text import one_line, visible


def files_dict(files: list[tuple[str, Path]], comment: str) -> list[str]:
    """The lines of ``FILES = {...}``: each of ``files`` (relative path, file) as its literal."""
    return [f"FILES = {{   # {one_line(comment)}", *(f"    {rel!r}: {embedded(f)}," for rel, f in files), "}"]


def literal(source: str) -> str:
    """A Python string literal of exactly ``source``: readable when it can be (a raw triple-quoted string
    that reads back as ``source``, with no control, bidi or invisible character raw in it), else ``repr``
    (which escapes every quote, backslash and unprintable character)."""
    raw = "r'''" + source + "'''"
    if visible(source) == source and "\r" not in source:
        try:
            if ast.literal_eval(raw) == source:
                return raw
        except (SyntaxError, ValueError):
            pass
    return repr(source)


def embedded(path: Path) -> str:
    """A Python expression of a probe file's source, exactly as Python would run it: its UTF-8 text as a
    literal (:func:`literal`; CRLF kept), or its bytes (base64) when it is not plain UTF-8 (another
    encoding, a BOM), which ``compile`` decodes as running the file would."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and not text.startswith("\ufeff"):
        return literal(text)
    return f"base64.b64decode({base64.b64encode(data).decode()!r})"
