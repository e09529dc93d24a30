"""A matrix grid's cells: each package's axis resolved to releases, the cross product minus exclusions."""
from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
from typing import Optional

from packaging.version import Version
from pydantic import BaseModel

from bisector.errors import UsageError
from bisector.matrix.grid_config import LATEST, MatrixConfig, MatrixSection, specifier
from bisector.sources.index import Release, find_release, list_releases
from bisector.sources.installer_config import resolve_index_url


class Slot(BaseModel):
    """One position on a package's axis: its label (a version or latest~K) and resolved release."""

    label: str
    version: str
    uploaded: Optional[dt.datetime] = None

    @property
    def release(self) -> Release:
        """The release in this slot."""
        return Release(version=self.version, uploaded=self.uploaded)


class Cell(BaseModel):
    """One grid point: a slot per package (grid order) -- one environment and one probe run."""

    slots: list[Slot]

    @property
    def key(self) -> str:
        """The cell's grid position (slot labels): what a later run is compared against."""
        return " | ".join(s.label for s in self.slots)

    def versions(self, packages: list[str]) -> dict[str, str]:
        """Package -> version of this cell (``packages`` in grid order)."""
        return {p: s.version for p, s in zip(packages, self.slots)}


def expand_axis(package: str, entries: list[str], releases: list[Release], pre: bool = False) -> list[Slot]:
    """The slots of one axis: exact versions are looked up; latest / latest-N take the newest releases."""
    usable = sorted((r for r in releases if pre or r.usable), key=lambda r: r.parsed)
    slots: list[Slot] = []
    for entry in entries:
        found = LATEST.match(entry)
        if not found:
            r = find_release(releases, entry)
            slots.append(Slot(label=r.version, version=r.version, uploaded=r.uploaded))
            continue
        if not usable:
            raise UsageError(f"{package}: no releases for '{entry}'")
        count = int(found.group(1) or 1)
        newest = usable[-count:]
        for back, r in zip(range(len(newest) - 1, -1, -1), newest):
            slots.append(Slot(label=f"latest~{back}" if back else "latest", version=r.version, uploaded=r.uploaded))
    return slots


def excluded(versions: dict[str, str], exclude: list[dict[str, str]]) -> bool:
    """True when every package named by one exclude entry matches the cell's version."""
    for entry in exclude:
        if all(specifier(spec).contains(Version(versions[p]), prereleases=True) for p, spec in entry.items()):
            return True
    return False


def build_cells(section: MatrixSection, axes: dict[str, list[Slot]]) -> tuple[list[Cell], int]:
    """The cross product in grid order (the candidate varies fastest), minus excluded cells."""
    packages = section.packages
    cand, others = packages[0], packages[1:]
    cells, dropped = [], 0
    for combo in itertools.product(*(axes[p] for p in others)):
        for slot in axes[cand]:
            cell = Cell(slots=[slot, *combo])
            if excluded(cell.versions(packages), section.exclude):
                dropped += 1
            else:
                cells.append(cell)
    return cells, dropped


def grid_id(config: MatrixConfig) -> str:
    """Identity of the grid and probe: runs with the same id are compared with each other."""
    m = config.matrix
    raw = {"grid": m.grid, "pins": m.pins, "exclude": m.exclude, "env": m.env, "index": m.index_url,
           "pre": m.pre, "probe": config.probe.fingerprint()}
    return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:12]


def resolve_axes(config: MatrixConfig, index_url: str) -> dict[str, list[Slot]]:
    """Every grid package's slots, resolved against the index now (``latest`` moves over time)."""
    m = config.matrix
    return {p: expand_axis(p, m.grid[p], list_releases(index_url, p), pre=m.pre) for p in m.packages}


def plan_cells(config: MatrixConfig) -> tuple[list[Cell], int]:
    """The cells to measure and how many were excluded; a usage error when exclusions leave none."""
    url = resolve_index_url(config.matrix.index_url)
    cells, dropped = build_cells(config.matrix, resolve_axes(config, url))
    if not cells:
        raise UsageError(f"the matrix has no cells left after {dropped} exclusions")
    return cells, dropped
