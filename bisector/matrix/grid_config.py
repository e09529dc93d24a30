"""The ``[matrix]`` table of ``bisect.toml``: the version grid, its pins and exclusions.

A grid names, per package, a list of entries: exact versions, ``latest`` (the newest release)
or ``latest-N`` (the N newest releases, slots ``latest~N-1`` ... ``latest~1``, ``latest``).
The first package is the candidate (its environment is built per cell); the others become
exact companion pins, as do ``pins``. ``exclude`` drops cells whose versions all match one
entry (a version or a PEP 440 specifier per package).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional, Union

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from bisector.job.config import RunSection
from bisector.job.layering import layer, read_toml, validated
from bisector.core.criterion import Compare, Criterion
from bisector.errors import OwnListError, UsageError
from bisector.job.metric_default import with_default_metric
from bisector.job.probe import BuiltinProbe, Probe

LATEST = re.compile(r"^latest(?:-(\d+))?$")
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def _check_entry(text: str) -> str:
    """A grid entry: ``latest``, ``latest-N`` (N >= 1) or a version."""
    text = str(text).strip()
    found = LATEST.match(text)
    if found:
        if found.group(1) is not None and int(found.group(1)) < 1:
            raise ValueError(f"'{text}': latest-N needs N >= 1")
        return text
    try:
        Version(text.removeprefix("v"))
    except ValueError:   # InvalidVersion, or a number past Python's int-string limit
        raise ValueError(f"'{text}' is not a version, 'latest' or 'latest-N'") from None
    return text


def _is_version(text: str) -> bool:
    try:
        Version(text.strip())
        return True
    except ValueError:   # InvalidVersion, or a number past Python's int-string limit
        return False


def specifier(text: str) -> SpecifierSet:
    """A version ("4.32.1" means ==4.32.1) or a specifier set (">=4.40,<4.42")."""
    try:
        return SpecifierSet(f"=={Version(text.strip())}")
    except ValueError:   # InvalidVersion, or a number past Python's int-string limit
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
            specifier(version)
        return {canonicalize_name(k): v.strip() for k, v in value.items()}

    @field_validator("exclude")
    @classmethod
    def _exclude(cls, value: list[dict[str, str]]) -> list[dict[str, str]]:
        for entry in value:
            if not entry:
                raise ValueError("an empty exclude entry would drop every cell")
            for version in entry.values():
                specifier(version)
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
    probe: Probe = BuiltinProbe(name="ga_memory")
    criterion: Criterion = Criterion()
    run: RunSection = RunSection()
    job: Optional[dict[str, Any]] = None  # the bisect job of `bisector run`; not used by the matrix

    @model_validator(mode="before")
    @classmethod
    def _probe_default_metric(cls, data):
        """A criterion that names no metric reads its probe's (a user's program: step_peak_bytes)."""
        return with_default_metric(data)

    @model_validator(mode="after")
    def _probe_metrics_known(self) -> "MatrixConfig":
        problems = [self.probe.known_metric(m) for m in [self.criterion.metric or "", *self.matrix.metrics] if m]
        if any(problems):
            raise OwnListError(next(p for p in problems if p))
        return self

    @model_validator(mode="after")
    def _rule(self) -> "MatrixConfig":
        if self.criterion.auto or self.criterion.max_change == "auto":
            raise ValueError("criterion.auto is not supported by matrix (nor max_change = auto); use threshold, "
                             "max_increase or max_change")
        if self.criterion.compare is Compare.STATS:
            raise ValueError("criterion.compare = stats is for bisects; the matrix reads noisy metrics through its "
                             "history's change points: use threshold or max_increase")
        return self


def load_matrix_config(path: Optional[Path], overrides: dict) -> MatrixConfig:
    """Load the ``[matrix]`` job from ``path`` with CLI overrides; one-line UsageError otherwise."""
    if path is None:
        raise UsageError("no matrix config: pass --config FILE or create ./bisect.toml with a [matrix] table")
    raw = read_toml(path)
    if not isinstance(raw.get("matrix"), dict):
        raise UsageError(f"{path}: no [matrix] table")
    return validated(MatrixConfig, layer(raw, overrides), str(path))
