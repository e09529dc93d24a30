"""What torch bases have in common, stored once: hard links where the wheels allow.

Two torch releases often need the very same ``nvidia-*`` / ``cuda-*`` / ``triton`` wheels (2.12.0 and
2.12.1 do) and the same versions of torch's other dependencies (sympy, networkx, ...), and two nightlies
a day apart hold mostly the same files of torch itself (its Python modules and headers; its libraries
differ). After pip installed a new base, each file whose RECORD entry (path, sha256, size) is the same in
an already built base, for a distribution of the same name and version, or for torch of any version, and
whose size on disk matches, becomes a hard link to that base's file: the same bytes, stored once. So does
the bytecode pip compiled from such a shared module (``__pycache__/<name>.<tag>.pyc``): it was compiled
from exactly those bytes (Python checks a ``.pyc`` against its source's size and mtime, which the shared
inode keeps, and sets the module's path from where it is imported, not from the path compiled into it).
Removing either base later leaves the other whole.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from pydantic import BaseModel

from bisector.envs.tooling.base_info import installed_dists
from bisector.envs.tooling.tool_runs import log

Entry = tuple[str, int]    # (RECORD hash, size)
ROOT = "torch"


class Shared(BaseModel):
    """What one new base shares with the bases built before it."""

    bytes: int = 0
    files: int = 0
    with_bases: list[str] = []


def _sites(prefix: Path) -> list[str]:
    return [str(p) for p in sorted(prefix.glob("lib/python*/site-packages"))]


def _record(dist_dir: Path) -> dict[str, Entry]:
    """path -> (hash, size) of every hashed file a distribution's RECORD lists."""
    out = {}
    try:
        text = (dist_dir / "RECORD").read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) == 3 and parts[1] and parts[2].isdigit() and not parts[0].startswith(".."):
            out[parts[0]] = (parts[1], int(parts[2]))
    return out


def _distributions(prefix: Path) -> dict[tuple[str, str], tuple[Path, dict[str, Entry]]]:
    """(name, version) -> (site dir, RECORD) of each distribution in a base; torch's under ("torch", "*"):
    its files are compared with those of every torch version."""
    found = {}
    for name, (dist, site, path) in installed_dists(_sites(prefix)).items():
        found[(name, "*" if name == ROOT else dist.version)] = (Path(site), _record(path))
    return found


def _link(source: Path, dest: Path) -> bool:
    tmp = dest.with_name(dest.name + ".bisector-link")
    try:
        os.link(source, tmp)
        os.replace(tmp, dest)
        return True
    except OSError:
        tmp.unlink(missing_ok=True)
        return False


def _bytecode(site: Path, rel: str) -> list[str]:
    """The ``.pyc`` files pip compiled from module ``rel`` (relative to ``site``)."""
    if not rel.endswith(".py"):
        return []
    folder, stem = os.path.split(rel)
    cache = site / folder / "__pycache__"
    try:
        names = os.listdir(cache)
    except OSError:
        return []
    return [os.path.join(folder, "__pycache__", n) for n in names if n.startswith(stem[:-3] + ".") and n.endswith(".pyc")]


def _share_file(src: Path, dest: Path, size: Optional[int]) -> bool:
    """Hard-link ``dest`` to ``src`` when both are regular files (of ``size`` bytes, when given), not yet
    the same file."""
    try:
        if src.is_symlink() or dest.is_symlink() or not (src.is_file() and dest.is_file()):
            return False
        if size is not None and not src.stat().st_size == dest.stat().st_size == size:
            return False
        return not os.path.samefile(src, dest) and _link(src, dest)
    except OSError:
        return False


def share_libraries(new: Path, others: list[Path]) -> Shared:
    """Hard-link the new base's files to identical ones of ``others`` (built bases; each file to the first
    of them that has it), with the bytecode compiled from each shared module."""
    shared = Shared()
    mine = _distributions(new)
    done: set[tuple[tuple[str, str], str]] = set()
    for other in others:
        theirs = _distributions(other)
        for key in [k for k in mine if k in theirs]:
            (site, record), (their_site, their_record) = mine[key], theirs[key]
            for rel, entry in record.items():
                if (key, rel) in done or their_record.get(rel) != entry or not _share_file(their_site / rel, site / rel,
                                                                                           entry[1]):
                    continue
                done.add((key, rel))
                shared.bytes, shared.files = shared.bytes + entry[1], shared.files + 1
                for pyc in _bytecode(site, rel):   # (its size differs with the path compiled into it)
                    if _share_file(their_site / pyc, site / pyc, None):
                        shared.bytes, shared.files = shared.bytes + (site / pyc).stat().st_size, shared.files + 1
                if other.name not in shared.with_bases:
                    shared.with_bases.append(other.name)
    if shared.files:
        log.info("the torch base shares %d files (%d bytes) with %s",
                 shared.files, shared.bytes, ", ".join(shared.with_bases))
    return shared
