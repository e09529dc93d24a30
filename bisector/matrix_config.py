"""The ``[matrix]`` table of ``bisect.toml``: the version grid, its expansion and its cells.

A grid names, per package, a list of entries: exact versions, ``latest`` (the newest release)
or ``latest-N`` (the N newest releases, slots ``latest~N-1`` ... ``latest~1``, ``latest``).
The first package is the candidate (its environment is built per cell); the others become
exact companion pins, as do ``pins``. ``exclude`` drops cells whose versions all match one
entry (a version or a PEP 440 specifier per package).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import re
from pathlib import Path
from typing import Any, Optional, Union

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from .config import RunSection, merge, read_toml, validation_message
from .criterion import Criterion
from .errors import UsageError
from .index import Release, find_release
from .probe import ProbeSpec

_LATEST = re.compile(r"^latest(?:-(\d+))?$")
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def _check_entry(text: str) -> str:
    """A grid entry: ``latest``, ``latest-N`` (N >= 1) or a version."""
    text = str(text).strip()
    found = _LATEST.match(text)
    if found:
        if found.group(1) is not None and int(found.group(1)) < 1:
            raise ValueError(f"'{text}': latest-N needs N >= 1")
        return text
    try:
        Version(text.removeprefix("v"))
    except InvalidVersion:
        raise ValueError(f"'{text}' is not a version, 'latest' or 'latest-N'") from None
    return text


def _is_version(text: str) -> bool:
    try:
        Version(text.strip())
        return True
    except InvalidVersion:
        return False


def _specifier(text: str) -> SpecifierSet:
    """A version ("4.32.1" means ==4.32.1) or a specifier set (">=4.40,<4.42")."""
    try:
        return SpecifierSet(f"=={Version(text.strip())}")
    except InvalidVersion:
        pass
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise ValueError(f"'{text}' is neither a version nor a version specifier") from None


def _name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(f"'{value}' is not a valid package name (PEP 508)")
    return canonicalize_name(value)


class MatrixSection(BaseModel):
    """``[matrix]``: the grid (ordered, first package = candidate), fixed pins, exclusions."""

    model_config = ConfigDict(extra="forbid")

    grid: dict[str, Union[str, list[str]]]
    pins: dict[str, str] = {}
    exclude: list[dict[str, str]] = []
    env: str = "default"
    index_url: Optional[str] = None
    metrics: list[str] = []
    pre: bool = False

    @field_validator("grid")
    @classmethod
    def _grid(cls, value: dict) -> dict[str, list[str]]:
        if not value:
            raise ValueError("the grid names no package")
        out: dict[str, list[str]] = {}
        for package, entries in value.items():
            entries = [entries] if isinstance(entries, str) else entries
            if not entries:
                raise ValueError(f"{package}: no versions")
            out[_name(package)] = [_check_entry(e) for e in entries]
        return out

    @field_validator("pins")
    @classmethod
    def _pins(cls, value: dict[str, str]) -> dict[str, str]:
        for package, version in value.items():
            _name(package)
            _specifier(version)
        return {canonicalize_name(k): v.strip() for k, v in value.items()}

    @field_validator("exclude")
    @classmethod
    def _exclude(cls, value: list[dict[str, str]]) -> list[dict[str, str]]:
        for entry in value:
            if not entry:
                raise ValueError("an empty exclude entry would drop every cell")
            for version in entry.values():
                _specifier(version)
        return [{canonicalize_name(k): v for k, v in e.items()} for e in value]

    @model_validator(mode="after")
    def _names_agree(self) -> "MatrixSection":
        both = sorted(set(self.pins) & set(self.grid))
        if both:
            raise ValueError(f"{both[0]} is both in the grid and pinned")
        torch_pin = self.pins.get("torch", "==0")
        exact = (torch_pin.startswith("==") or _is_version(torch_pin)) and not any(c in torch_pin for c in "<>!~*,")
        if not exact:
            raise ValueError(f"torch is the shared base of every environment: pin it to one version, not {torch_pin!r}")
        for entry in self.exclude:
            unknown = sorted(set(entry) - set(self.grid))
            if unknown:
                raise ValueError(f"exclude names {unknown[0]}, which is not in the grid")
        return self

    @property
    def packages(self) -> list[str]:
        """Grid packages in order; the first is the candidate."""
        return list(self.grid)


class MatrixConfig(BaseModel):
    """A matrix job: ``[matrix]`` with the ``[probe]``, ``[criterion]`` and ``[run]`` of ``bisector run``."""

    model_config = ConfigDict(extra="forbid")

    matrix: MatrixSection
    probe: ProbeSpec = ProbeSpec(name="ga_memory")
    criterion: Criterion = Criterion()
    run: RunSection = RunSection()
    job: Optional[dict[str, Any]] = None  # the bisect job of `bisector run`; not used by the matrix

    @model_validator(mode="after")
    def _rule(self) -> "MatrixConfig":
        if self.criterion.auto:
            raise ValueError("criterion.auto is not supported by matrix; use threshold or max_increase")
        return self


def load_matrix_config(path: Optional[Path], overrides: dict) -> MatrixConfig:
    """Load the ``[matrix]`` job from ``path`` with CLI overrides; one-line UsageError otherwise."""
    if path is None:
        raise UsageError("no matrix config: pass --config FILE or create ./bisect.toml with a [matrix] table")
    raw = read_toml(path)
    if not isinstance(raw.get("matrix"), dict):
        raise UsageError(f"{path}: no [matrix] table")
    data = merge(raw, overrides)
    given = overrides.get("probe", {})
    if isinstance(data.get("probe"), dict) and any(given.get(k) for k in ("name", "path", "cmd")):
        data["probe"] = {k: v for k, v in data["probe"].items() if k not in ("name", "path", "cmd") or given.get(k)}
    try:
        return MatrixConfig.model_validate(data)
    except ValidationError as exc:
        raise UsageError(validation_message(str(path), exc)) from None


# -- expansion ------------------------------------------------------------------------------

class Slot(BaseModel):
    """One position on a package's axis: its label (a version or latest~K) and resolved release."""

    label: str
    version: str
    uploaded: Optional[dt.datetime] = None


class Cell(BaseModel):
    """One grid point: a slot per package (grid order) -- one environment and one probe run."""

    slots: list[Slot]

    @property
    def key(self) -> str:
        """The cell's grid position (slot labels): what a later run is compared against."""
        return " | ".join(s.label for s in self.slots)

    def versions(self, packages: list[str]) -> dict[str, str]:
        return {p: s.version for p, s in zip(packages, self.slots)}


def _eligible(releases: list[Release], pre: bool) -> list[Release]:
    return [r for r in releases if pre or not (r.yanked or r.parsed.is_prerelease)]


def expand_axis(package: str, entries: list[str], releases: list[Release], pre: bool = False) -> list[Slot]:
    """The slots of one axis: exact versions are looked up; latest / latest-N take the newest releases."""
    usable = sorted(_eligible(releases, pre), key=lambda r: r.parsed)
    slots: list[Slot] = []
    for entry in entries:
        found = _LATEST.match(entry)
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
        if all(_specifier(spec).contains(Version(versions[p]), prereleases=True) for p, spec in entry.items()):
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
