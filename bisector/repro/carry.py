"""The user's files a command run's repro carries, so that it stands alone: the files the command's words name
(``python train.py --config conf.yaml``, ``--config=conf.yaml`` too) inside the directory the command ran in,
each a text file (UTF-8, no NUL) of at most :data:`FILE_MAX` bytes (:data:`TOTAL_MAX` in all), with its secrets
masked by bisector's one redaction pass (bisector.repro.source_mask: Python source in its strings and comments
only, so it still runs) and the sha256 of what the script writes. The script
writes them beside itself and runs the command there (bisector/data/repro/command_repro.py).

What a word names that cannot be carried is said, with why, in the script's header and when the command fails:
a directory, a data file (not text), a file over the bound, a path outside the directory (absolute, ``../``, or
a link out of it), anything but a regular file. Words that name nothing there (flags, values, files the
program will write) are left alone.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from bisector.core.units import human_bytes
from bisector.repro.embed import literal
from bisector.repro.source_mask import masked
from bisector.safety.safe_text import one_line

FILE_MAX = 256 << 10    # a carried file at most (a script or a config; a dataset is not carried)
TOTAL_MAX = 1 << 20     # all carried files together
WORD_MAX = 4096         # a longer word (``-c`` code) names no file


@dataclass(frozen=True)
class Carried:
    """One carried file: its path relative to the directory the command ran in (as the command names it), what
    the script writes there (secrets masked), the sha256 of those bytes, its mode, and whether masking changed it."""

    rel: str
    text: str
    sha256: str
    mode: int
    masked: bool


@dataclass
class Carry:
    """What the repro carries of the command's files, and what it cannot (each: the word, then why)."""

    files: list[Carried] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


def _named(words: list[str]) -> list[str]:
    """The words that may name a path: each word, and the value of a ``--flag=value`` word."""
    out = []
    for word in words:
        if not word or len(word) > WORD_MAX or "\0" in word or "\n" in word:
            continue
        out.append(word)
        if word.startswith("-") and "=" in word:
            out.append(word.split("=", 1)[1])
    return [w for w in dict.fromkeys(out) if w]


def _why_not(word: str, path: Path, root: Path) -> Optional[str]:
    """Why ``path`` (what ``word`` names) cannot be carried; None when it can."""
    rel = os.path.normpath(word)
    if os.path.isabs(word) or rel == ".." or rel.startswith(".." + os.sep):
        return "outside the directory the command ran in: give it at the same path"
    if rel == ".":
        return "the directory the command ran in"
    try:
        inside = path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):
        inside = False
    if not inside:
        return "a link out of the directory the command ran in: give it at the same path"
    if path.is_dir():
        return "a directory"
    if not path.is_file():
        return "not a regular file"
    return None


def _read(path: Path, room: int) -> tuple[Optional[str], str]:
    """(the file's text, '') or (None, why it is not carried)."""
    size = path.stat().st_size
    if size > min(FILE_MAX, room):
        bound = FILE_MAX if size > FILE_MAX else TOTAL_MAX
        return None, f"{human_bytes(size)}, over the {human_bytes(bound)} the repro carries"
    data = path.read_bytes()[:FILE_MAX + 1]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\0" in text or text.startswith("\ufeff"):
        return None, f"a data file, not text ({human_bytes(len(data))})"
    return text, ""


def _is_python(path: Path, text: str) -> bool:
    return path.suffix in (".py", ".pyw") or (text.startswith("#!") and "python" in text.split("\n", 1)[0])


def carry(words: list[str], workdir: Optional[Path]) -> Carry:
    """The files ``words`` name in ``workdir`` (the directory the command ran in), carried or said (see the
    module); nothing without a directory."""
    out = Carry()
    if workdir is None:
        return out
    root = Path(workdir).resolve()
    total, seen = 0, set()
    for word in _named(words):
        path = Path(word) if os.path.isabs(word) else root / word
        with contextlib.suppress(OSError, ValueError):
            if not os.path.lexists(path) or not path.exists():
                continue
            rel = Path(os.path.normpath(word)).as_posix()
            if rel in seen:
                continue
            seen.add(rel)
            why = _why_not(word, path, root)
            text = None
            if why is None:
                text, why = _read(path, TOTAL_MAX - total)
            if text is None:
                out.left_out.append(f"{rel}{'/' if path.is_dir() and rel != '.' else ''} ({why})")
                continue
            shown = masked(text, _is_python(path, text))
            if shown is None:
                out.left_out.append(f"{rel} (what looks like a secret in it cannot be masked and leave it Python)")
                continue
            data = shown.encode("utf-8")
            total += len(data)
            mode = 0o755 if path.stat().st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH) else 0o644
            out.files.append(Carried(rel, shown, hashlib.sha256(data).hexdigest(), mode, shown != text))
    return out


def carried_settings(c: Carry) -> list[str]:
    """The script's ``CARRIED`` and ``NOT_CARRIED`` (each file's source a literal that reads back byte for byte)."""
    lines = ["CARRIED = {   # the files the command names that this script carries (written beside it when it runs)"]
    for f in c.files:
        lines.append(f"    {f.rel!r}: {{'sha256': {f.sha256!r}, 'mode': {oct(f.mode)}, 'source': {literal(f.text)}}},")
    lines.append("}")
    lines.append(f"NOT_CARRIED = {c.left_out!r}   # what else the command names, with why it is not carried")
    return lines


def header_lines(c: Carry, name: str) -> list[str]:
    """The header's words on the files (prose, wrapped by the header): what is carried, with each sha256, and what
    is not, with how to provide it."""
    out = ["The command runs in the directory this script is in."]
    if c.files:
        masked = [f.rel for f in c.files if f.masked]
        each = ", ".join(f"{f.rel} ({human_bytes(len(f.text.encode()))}, sha256 {f.sha256})" for f in c.files)
        out.append(f"{name} carries the files the command names there and writes each beside itself when it runs "
                   f"(a file already there is kept): {each}."
                   + (f" Secrets in {', '.join(masked)} are masked as ***: put yours back." if masked else ""))
    if c.left_out:
        out.append(f"Not carried (put each there by hand, at the path the command names, before running it): "
                   + "; ".join(c.left_out) + ".")
    return [one_line(line) for line in out]
