"""The inputs a user's program names on its command line (a script, a config, a tokenizer directory), hashed into
its measurement's key: change one and the program is measured again instead of reusing a stale measurement.

A word names an input when it is an existing path, given bare or as a flag's value (``--config=cfg.json``);
relative words are read from where the program runs. Files are hashed by content up to a size (beyond it, by
size and modification time), directories only under the working directory and walked in a bounded way (their
files the same way; ``.git`` and ``__pycache__`` left out). What the program writes is no input: the value of a
flag named like an output (``--output_dir``, ``--logging-dir``, ``--save_path``, ``--cache_dir``, ``-o``...) is
left out, or every run would change its own key. The digest is taken once per process (a run's phases all
measure under the key the run started with, whatever the program writes meanwhile).
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
from pathlib import Path
from typing import Iterator

FILE_CONTENT_MAX = 16 << 20      # a file up to this is hashed by its bytes; a larger one by size and mtime
CONTENT_BUDGET = 256 << 20       # bytes read for one fingerprint in all; past it, files count by size and mtime
DIR_FILES_MAX = 20_000           # files of one named directory; past it, the count stands for the rest
SKIPPED_DIRS = {".git", "__pycache__", ".venv", "node_modules"}
# a flag whose value the program writes: --output_dir, --logging-dir, --save_path, --cache_dir, --ckpt, -o, --out
_OUTPUT_FLAG = re.compile(r"^-(o|-(\w*[_-])?(out|output|outputs|logging|log|logs|save|cache|checkpoint|checkpoints|ckpt|"
                          r"tmp|run|runs)([_-]\w*)?)$", re.I)


def named_paths(words: list[str], workdir: Path) -> Iterator[tuple[str, Path]]:
    """(word, path) for each word of ``words`` that names an existing file, or a directory inside ``workdir``."""
    root = workdir.resolve()
    for i, word in enumerate(words):
        if i == 0 and "/" not in word:
            continue   # the program itself by name (python, torchrun): not an input
        if _OUTPUT_FLAG.match(word.partition("=")[0]) or (i and _OUTPUT_FLAG.match(words[i - 1])):
            continue   # where the program writes (--output_dir out, --output_dir=out): not an input
        for text in dict.fromkeys([word, word.partition("=")[2] if word.startswith("-") else ""]):
            if not text or "\x00" in text:
                continue
            path = Path(text) if os.path.isabs(text) else workdir / text
            if path.is_file():
                yield text, path
            elif path.is_dir() and path.resolve().is_relative_to(root):
                yield text, path


def _file_bytes(path: Path, budget: list[int]) -> bytes:
    size = path.stat().st_size
    if size <= FILE_CONTENT_MAX and size <= budget[0]:
        budget[0] -= size
        return path.read_bytes()
    st = path.stat()
    return f"size={st.st_size} mtime_ns={st.st_mtime_ns}".encode()


def _dir_files(path: Path) -> Iterator[Path]:
    for top, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            yield Path(top, name)


def hash_inputs(h, words: list[str], workdir: Path) -> None:
    """Feed ``h`` the digest of the named inputs of ``words`` (taken once per process: :func:`_inputs_digest`)."""
    h.update(_inputs_digest(tuple(words), str(workdir)))


@functools.lru_cache(maxsize=64)
def _inputs_digest(words: tuple[str, ...], workdir: str) -> bytes:
    """A file as its word and bytes, a directory as its word and each file's relative path and bytes."""
    h = hashlib.sha256()
    workdir = Path(workdir)
    budget = [CONTENT_BUDGET]
    for word, path in named_paths(words, workdir):
        if path.is_file():
            h.update(word.encode() + b"\0" + _file_bytes(path, budget))
            continue
        h.update(b"dir\0" + word.encode())
        for count, f in enumerate(_dir_files(path)):
            if count >= DIR_FILES_MAX:
                h.update(b"\0more files")
                break
            if f.is_file():
                h.update(b"\0" + f.relative_to(path).as_posix().encode() + b"\0" + _file_bytes(f, budget))
    return h.digest()
