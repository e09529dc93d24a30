"""What travels with a measurement, typed: the environment as it was when the probe ran in it
(:class:`EnvFacts`, taken then, where the probe ran: on a Ray node, that node's environment) and the
fields a probe result declares beside its metrics (:class:`ResultFacts`). Host code reads these,
never an environment's files after the measurement, nor a measurement's ``details`` by key."""
from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError


class EnvFacts(BaseModel):
    """A candidate environment when a measurement used it."""

    path: str                                  # where it was built (on the machine that ran the probe)
    python: Optional[str] = None
    packages: dict[str, str] = {}              # name -> version: its own resolution, the base's, torch
    torch: Optional[str] = None                # torch's build version (local label kept: 2.11.0+cu130)
    torch_from: Optional[str] = None           # where that torch comes from
    torch_git: Optional[str] = None            # the commit that torch was built from (torch.version.git_version)
    repository_url: Optional[str] = None       # the repository the package's METADATA names

    def versions(self) -> dict[str, str]:
        """python and every package, name -> version (the environment's record of itself), with where
        torch comes from and the commit it was built from."""
        return {**({"python": self.python} if self.python else {}), **self.packages,
                **({"torch from": self.torch_from} if self.torch_from else {}),
                **({"torch git": self.torch_git} if self.torch_git else {})}


class ResultFacts(BaseModel):
    """The fields of a probe result beside its metrics that host code reads (others pass through to
    the probe's explainer as they are). A custom probe's field of one of these names but another type
    is left out of the typed view (:meth:`of`), never a crash; :meth:`fields` gives what it wrote."""

    model_config = ConfigDict(extra="allow")
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    schema_version: Optional[Any] = None
    probe: dict[str, Any] = {}                 # the probe's name, version, config hash and config
    meter: Optional[str] = None
    device: dict[str, Any] = {}
    versions: dict[str, Any] = {}
    cells: list[dict[str, Any]] = []
    oom_cells: list[Any] = []
    cell_errors: int = 0                       # how many cells failed
    knobs: Optional[dict[str, Any]] = None

    @classmethod
    def of(cls, data: dict[str, Any]) -> "ResultFacts":
        """The typed view of a stored result (its mistyped declared fields left out of it)."""
        try:
            facts = cls.model_validate(data)
        except ValidationError as exc:
            bad = {str(e["loc"][0]) for e in exc.errors() if e.get("loc")}
            facts = cls.model_validate({k: v for k, v in data.items() if k not in bad})
        facts._raw = dict(data)
        return facts

    def fields(self) -> dict[str, Any]:
        """Every field the probe wrote beside its metrics, as it wrote them (what its explainer reads)."""
        return dict(self._raw) if self._raw else self.model_dump(exclude_unset=True)
