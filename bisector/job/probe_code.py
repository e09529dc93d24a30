"""The code a built-in probe runs, as files: its own, the contract and the modules of the probes' meter library
it uses, found by reading its imports (never by running it: probes import torch, which bisector never does).
What its fingerprint hashes, a warm worker's key, a Ray task ships and a repro script embeds."""
from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Optional

from bisector.data import probes_dir

CONTRACT = "_probe_contract.py"   # the shared result writer every built-in probe imports


def builtin_files(script: Path) -> list[Path]:
    """The files a built-in probe's output depends on: its own (the whole directory of a probe package, or
    the one script), the shared contract, and the shared modules its files use, followed through their own
    imports (:func:`shared_modules`: the meter library's modules one by one); never another probe's files,
    nor a shared module none of them uses."""
    own = sorted(script.parent.rglob("*.py")) if script.name == "__main__.py" else [script]
    shared = shared_modules()
    needed, todo = {CONTRACT.removesuffix(".py")}, list(own)
    while todo:
        for name in _named_modules(todo.pop(), shared):
            parts = name.split(".")
            for dotted in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):   # a package's __init__ too
                if dotted in shared and dotted not in needed:
                    needed.add(dotted)
                    todo.append(shared[dotted])
    return own + [shared[n] for n in sorted(needed) if n in shared and shared[n] not in own]


def shared_modules() -> dict[str, Path]:
    """The modules of probes/ that belong to no probe, by dotted name: ``_name.py`` beside the probes (the
    contract) and every module of a ``_name/`` package there (the meter library ``_meters``)."""
    root = probes_dir()
    out = {f.stem: f for f in root.glob("_*.py") if f.name != "__init__.py"}
    for package in sorted(p for p in root.glob("_*") if p.is_dir()):
        for f in sorted(package.rglob("*.py")):
            parts = f.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _named_modules(path: Path, shared: dict[str, Path]) -> set[str]:
    """The modules a probe file uses: what its ``import`` statements name (a shared package's relative
    imports resolved), and any string in it that is a shared module's dotted name (a module loaded by name or
    by path: ``"_meters.tensor_bytes"``)."""
    stat = path.stat()
    return set(_parsed_names(str(path), stat.st_mtime_ns, stat.st_size, _package_of(path, shared)))


def _package_of(path: Path, shared: dict[str, Path]) -> Optional[str]:
    """The dotted package a shared module is in (None for a probe's own file: its relative imports stay in it)."""
    for name, f in shared.items():
        if f == path:
            return name if path.name == "__init__.py" else name.rpartition(".")[0]
    return None


@functools.lru_cache(maxsize=512)
def _parsed_names(path: str, _mtime: int, _size: int, package: Optional[str]) -> tuple[str, ...]:
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (SyntaxError, ValueError):
        return ()   # the probe fails on it where it runs; its own files are fingerprinted all the same
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                if package is None:
                    continue
                up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            out += [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_"):
            out.append(node.value)
    return tuple(out)
