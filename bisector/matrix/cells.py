"""A matrix grid's cells: each package's axis resolved to releases, the cross product minus exclusions."""
from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
from pathlib import Path
from typing import Optional

from packaging.version import Version
from pydantic import BaseModel

from bisector.errors import UsageError
from bisector.matrix.grid_config import LATEST, MatrixConfig, MatrixSection, specifier
from bisector.matrix.grid_result import InvalidCell
from bisector.matrix.validity import Checker
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
    """One grid point: a slot per package (grid order) -- one environment and one probe run.

    ``as_of``: the date its environment resolves everything unpinned as of: the newest release date of
    its pinned packages (the grid's and the exact pins), so every pinned release can exist in it (the
    newest transformers needs the huggingface-hub of its own day, not of an older accelerate's)."""

    slots: list[Slot]
    as_of: Optional[dt.datetime] = None

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


def exact_pins(section: MatrixSection) -> dict[str, str]:
    """The pins that name one version (``numpy = "1.26.4"``, ``torch = "==2.5.1"``): package -> version."""
    out = {}
    for package, text in section.pins.items():
        items = list(specifier(text))
        if len(items) == 1 and items[0].operator in ("==", "===") and "*" not in items[0].version:
            out[package] = items[0].version
    return out


class Plan(BaseModel):
    """What a matrix run measures: the valid cells, how many were excluded, the cells the packages'
    metadata declare invalid (never built), and notes on what could not be checked."""

    cells: list[Cell]
    excluded: int = 0
    invalid: list[InvalidCell] = []
    notes: list[str] = []


def _dated(cells: list[Cell], pin_dates: list[dt.datetime]) -> list[Cell]:
    out = []
    for cell in cells:
        dates = [s.uploaded for s in cell.slots if s.uploaded] + pin_dates
        out.append(cell.model_copy(update={"as_of": max(dates) if dates else None}))
    return out


def plan_cells(config: MatrixConfig, cache_dir: Path) -> Plan:
    """The cells to measure (dated), the excluded count and the invalid cells; a usage error when
    exclusions leave none."""
    m = config.matrix
    url = resolve_index_url(m.index_url)
    cells, dropped = build_cells(m, resolve_axes(config, url))
    if not cells:
        raise UsageError(f"the matrix has no cells left after {dropped} exclusions")
    pins = exact_pins(m)
    pin_dates = [find_release(list_releases(url, p), v).uploaded for p, v in pins.items()]
    checker, valid, invalid = Checker(url, cache_dir), [], []
    for cell in _dated(cells, [d for d in pin_dates if d]):
        versions = {**cell.versions(m.packages), **pins}
        why = checker.why_invalid(versions)
        if why:
            invalid.append(InvalidCell(key=cell.key, versions=cell.versions(m.packages), reason=why))
        else:
            valid.append(cell)
    if not valid:
        raise UsageError(f"no cell of the matrix is a valid combination ({len(invalid)} cells; the first: "
                         f"{invalid[0].reason})")
    notes = [f"could not check {what} against the other packages' declared requirements: {why}"
             for what, why in checker.unread.items()]
    return Plan(cells=valid, excluded=dropped, invalid=invalid, notes=notes)
