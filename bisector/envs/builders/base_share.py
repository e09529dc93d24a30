"""The CUDA libraries torch bases have in common, stored once: hard links where the wheels allow.

Two torch releases often need the very same ``nvidia-*`` / ``cuda-*`` / ``triton`` wheels (2.12.0 and
2.12.1 do). After pip installed a new base, each file of such a distribution whose RECORD entry (path,
sha256, size) is the same in an already built base of the same distribution and version, and whose size
on disk matches, becomes a hard link to that base's file: the same bytes, stored once. Removing either
base later leaves the other whole. torch's own files are never shared (every release differs).
"""
from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

from bisector.envs.tooling.base_info import installed_dists
from bisector.envs.builders.torch_size import HEAVY
from bisector.envs.tooling.tool_runs import log

Entry = tuple[str, int]    # (RECORD hash, size)


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


def _libraries(prefix: Path) -> dict[tuple[str, str], tuple[Path, dict[str, Entry]]]:
    """(name, version) -> (site dir, RECORD) of each CUDA library distribution in a base."""
    found = {}
    sites = _sites(prefix)
    for name, (dist, site, path) in installed_dists(sites).items():
        if HEAVY.match(name) and name != "torch":
            found[(name, dist.version)] = (Path(site), _record(path))
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


def share_libraries(new: Path, others: list[Path]) -> Shared:
    """Hard-link the new base's CUDA library files to identical ones of ``others`` (built bases)."""
    shared = Shared()
    mine = _libraries(new)
    for other in others:
        if not mine:
            break
        theirs = _libraries(other)
        for key in [k for k in mine if k in theirs]:
            (site, record), (their_site, their_record) = mine.pop(key), theirs[key]
            for rel, entry in record.items():
                if their_record.get(rel) != entry:
                    continue
                src, dest = their_site / rel, site / rel
                try:
                    same = src.stat().st_size == dest.stat().st_size == entry[1] and not dest.is_symlink()
                    linked = os.path.samefile(src, dest)
                except OSError:
                    continue
                if same and not linked and _link(src, dest):
                    shared.bytes += entry[1]
                    shared.files += 1
            if other.name not in shared.with_bases:
                shared.with_bases.append(other.name)
    if shared.files:
        log.info("the torch base shares %d files (%d bytes) of its CUDA libraries with %s",
                 shared.files, shared.bytes, ", ".join(shared.with_bases))
    return shared
