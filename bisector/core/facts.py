"""What travels with a measurement, typed once where it enters (the probe's result file, the store's row):
the environment as it was when the probe ran in it (:class:`EnvFacts`, taken then, where the probe ran:
on a Ray node, that node's environment), the probe's result (:class:`ProbeResult`, the one model of it:
the contract's fields, the device it ran on as a :class:`Device`). Host code reads these, never an
environment's files after the measurement, nor a result's fields by key."""
from __future__ import annotations

import math
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, field_validator

RESULT_ENV = "BISECTOR_RESULT"   # the variable naming the file a probe writes its result to


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


class Device(BaseModel):
    """What a probe ran on, as its result says: ``type`` ("cpu", "cuda"), the model's ``name`` (a GPU's, or
    the CPU's), and on CUDA its ``uuid``, ``driver``, CUDA runtime (``cuda``) and memory (``total_bytes``);
    on the CPU the ``threads`` it used. Other facts a probe adds pass through."""

    model_config = ConfigDict(extra="allow")

    type: Optional[str] = None
    name: Optional[str] = None
    uuid: Optional[str] = None
    driver: Optional[str] = None
    cuda: Optional[str] = None
    total_bytes: Optional[int] = None
    threads: Optional[int] = None
    requested: Optional[str] = None            # the device the probe was asked for

    @property
    def gpu_label(self) -> Optional[str]:
        """The GPU as reports show it: model and memory ("NVIDIA H200, 139.8 GiB")."""
        if not self.name:
            return None
        return f"{self.name}, {self.total_bytes / (1 << 30):.1f} GiB" if self.total_bytes else self.name

    @property
    def cpu_label(self) -> str:
        """The CPU as reports show it: model and the threads the probe used."""
        return f"{self.name or 'unknown'}" + (f", {self.threads} threads" if self.threads else "")


class ProbeResult(BaseModel):
    """What a probe writes to ``$BISECTOR_RESULT`` (the contract: probes/README.md), and what a stored
    measurement keeps of it beside its metrics. Only ``metrics`` is required of a probe; built-in probes
    add the rest. A custom probe's field of one of these names but another type is left out of the typed
    view (:meth:`of`), never a crash; :meth:`fields` gives what it wrote."""

    model_config = ConfigDict(extra="allow")
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    metrics: dict[str, float] = {}             # name -> value (finite)
    schema_version: Optional[Any] = None       # the probe's result schema (its explainer is chosen by it)
    probe: dict[str, Any] = {}                 # the probe's name, version, config hash and config
    meter: Optional[str] = None                # what measured: cpu-dispatch, cuda, rss ...
    device: Device = Device()
    versions: dict[str, Any] = {}              # the ML stack as the probe imported it
    cells: list[dict[str, Any]] = []           # per-setting records (ga_memory: precision x GA x width)
    oom_cells: list[Any] = []                  # the cells that ran out of memory while others were measured
    cell_errors: int = 0                       # how many cells failed
    knobs: Optional[dict[str, Any]] = None     # the effective settings of the probe's loop
    error: Optional[str] = None                # why the probe could not measure (it exits non-zero too)
    absent: dict[str, str] = {}                # metric -> why the probe left it out (the command meter)
    units: dict[str, str] = {}                 # metric -> the unit the probe declares for it ("MiB", "ms")
    missing_program: Optional[str] = None      # a program the environment lacks (an environment failure)

    @field_validator("metrics")
    @classmethod
    def _finite(cls, value: dict[str, float]) -> dict[str, float]:
        return finite_metrics(value)

    @classmethod
    def read(cls, data: Any) -> "ProbeResult":
        """A result file's content at the boundary: an object whose ``metrics`` map names to finite
        numbers (ValidationError otherwise: the measurement is bad output); the other fields typed as
        :meth:`of` types them."""
        if not isinstance(data, dict) or "metrics" not in data:
            raise ValueError("a probe result is a JSON object with a 'metrics' object")
        metrics = _Metrics.model_validate({"metrics": data["metrics"]}).metrics
        return cls.of({k: v for k, v in data.items() if k != "metrics"}).model_copy(update={"metrics": metrics})

    @classmethod
    def of(cls, data: dict[str, Any]) -> "ProbeResult":
        """The typed view of a stored result (its mistyped declared fields left out of it)."""
        try:
            facts = cls.model_validate(data)
        except ValidationError as exc:
            bad = {str(e["loc"][0]) for e in exc.errors() if e.get("loc")}
            facts = cls.model_validate({k: v for k, v in data.items() if k not in bad})
        facts._raw = {k: v for k, v in data.items() if k != "metrics"}
        return facts

    def fields(self) -> dict[str, Any]:
        """Every field the probe wrote beside its metrics, as it wrote them (what its explainer reads and
        the store keeps)."""
        if self._raw:
            return dict(self._raw)
        return self.model_dump(mode="json", exclude_unset=True, exclude={"metrics"})


class _Metrics(BaseModel):
    """A result's metrics, strictly: a probe's other fields may be loose, its numbers may not."""

    metrics: dict[str, float]

    @field_validator("metrics")
    @classmethod
    def _finite(cls, value: dict[str, float]) -> dict[str, float]:
        return finite_metrics(value)


def finite_metrics(value: dict[str, float]) -> dict[str, float]:
    """``value`` when every metric is a finite number (ValueError naming the others)."""
    bad = [k for k, v in value.items() if not math.isfinite(v)]
    if bad:
        raise ValueError(f"non-finite metric values: {', '.join(sorted(bad))}")
    return value
