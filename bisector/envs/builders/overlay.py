"""The base overlay: a dir of symlinks exposing torch's dependency closure and nothing else.

Built once per base (``<cache>/overlays/<base fingerprint>``). Each closure distribution's
files are found from its RECORD (top_level.txt when it has none). A top-level entry owned
only by closure distributions is linked whole; an entry shared with other distributions
(a namespace package) becomes a real dir and the rule recurses, so nothing outside the
closure leaks. The .dist-info dirs are linked too, so importlib.metadata sees torch.

A candidate venv gets ``zz_bisector_base.pth`` naming the overlay: site.py appends it to
sys.path *after* the venv's own site-packages, so versions the candidate resolved win.
"""
from __future__ import annotations

import os
from collections import defaultdict
from importlib.metadata import PathDistribution
from pathlib import Path
from typing import Optional

from packaging.utils import canonicalize_name

from bisector.envs.model.info import BaseInfo
from bisector.envs.model.layout import COMPLETE, PTH_NAME, CacheLayout
from bisector.envs.builders.once import build_once

Item = tuple[tuple[str, ...], str]          # (path parts below the site dir, owner)


def _entries_for(site: str, top: str) -> list[str]:
    return [e for e in os.listdir(site)
            if e == top or (e.startswith(top + ".") and e.endswith((".py", ".so", ".pyd")))]


def _record_paths(dist_dir: Path) -> Optional[list[tuple[str, ...]]]:
    """Paths listed in RECORD (a fast reader: only the path column is needed)."""
    try:
        text = (dist_dir / "RECORD").read_text(errors="replace")
    except OSError:
        return None
    paths = []
    for line in text.splitlines():
        path = line.rsplit(",", 2)[0] if line.count(",") >= 2 else line
        if path.startswith('"') and path.endswith('"'):
            path = path[1:-1].replace('""', '"')
        parts = tuple(p for p in path.split("/") if p and p != ".")
        if parts and parts[0] != ".." and "__pycache__" not in parts:
            paths.append(parts)
    return paths


def _dist_items(site: str, dist_dir: Path) -> list[Item]:
    dist = PathDistribution(dist_dir)
    owner = canonicalize_name(dist.metadata["Name"] or dist_dir.name)
    items: list[Item] = [((dist_dir.name,), owner)]
    paths = _record_paths(dist_dir)
    if paths is None:
        for top in (dist.read_text("top_level.txt") or "").split():
            items += [((e,), owner) for e in _entries_for(site, top)]
        return items
    return items + [(p, owner) for p in paths if not (len(p) == 1 and p[0].endswith(".pth"))]


def site_items(site: str) -> list[Item]:
    """(parts, owner) for every file every distribution in ``site`` claims."""
    items: list[Item] = []
    for entry in sorted(os.listdir(site)):
        if entry.endswith((".dist-info", ".egg-info")):
            items += _dist_items(site, Path(site) / entry)
    return items


def choose(prefix: tuple[str, ...], items: list[Item], closure: set[str]) -> list[tuple[str, ...]]:
    """Paths to link: the largest entries below ``prefix`` whose owners all lie in ``closure``."""
    depth = len(prefix)
    children: dict[str, list[Item]] = defaultdict(list)
    for parts, owner in items:
        if len(parts) > depth:
            children[parts[depth]].append((parts, owner))
    chosen: list[tuple[str, ...]] = []
    for child, sub in sorted(children.items()):
        path = prefix + (child,)
        owners = {owner for _, owner in sub}
        if not owners & closure:
            continue
        is_file = any(len(parts) == len(path) for parts, _ in sub)
        if owners <= closure or is_file:
            chosen.append(path)
        else:
            chosen += choose(path, sub, closure)
    return chosen


def overlay_links(base: BaseInfo) -> list[tuple[str, str]]:
    """(relative path in the overlay, absolute source) for every link; first site dir wins."""
    names = {d.name for d in base.closure}
    links: dict[str, str] = {}
    for site in dict.fromkeys(d.site_dir for d in base.closure):
        for parts in choose((), site_items(site), names):
            rel = "/".join(parts)
            source = os.path.join(site, *parts)
            if rel not in links and os.path.lexists(source):
                links[rel] = source
    return sorted(links.items())


def _populate(root: Path, links: list[tuple[str, str]]) -> None:
    root.mkdir()
    for rel, source in links:
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(source, dest)
    (root / COMPLETE).write_text("".join(f"{rel}\n" for rel, _ in links))


def ensure_overlay(base: BaseInfo, layout: CacheLayout) -> Optional[Path]:
    """The overlay dir of ``base`` (None when the base has no torch); built once, atomically."""
    if not base.closure:
        return None
    dest = layout.overlays / base.fingerprint
    return build_once(layout, f"overlay-{base.fingerprint}", dest,
                      lambda: dest if (dest / COMPLETE).exists() else None,
                      lambda staging: _populate(staging, overlay_links(base)))


def overlay_of(site_packages: Path) -> Optional[Path]:
    """The overlay a venv's site-packages points at (its base's packages: torch), None when it has none."""
    try:
        line = (site_packages / PTH_NAME).read_text().strip().splitlines()[0]
    except (OSError, IndexError):
        return None
    return Path(line) if line and Path(line).is_dir() else None


def install_pth(site_packages: Path, overlay: Optional[Path]) -> None:
    """Point a venv's site-packages at the overlay (appended after the venv's own packages)."""
    if overlay is not None:
        (site_packages / PTH_NAME).write_text(f"{overlay}\n")
