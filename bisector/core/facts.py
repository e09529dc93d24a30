"""What travels with a measurement, typed once where it enters (the probe's result file, the store's row):
the environment as it was when the probe ran in it (:class:`EnvFacts`, taken then, where the probe ran:
on a Ray node, that node's environment), the probe's result (:class:`ProbeResult`, the one model of it:
the contract's fields, the device it ran on as a :class:`Device`). Host code reads these, never an
environment's files after the measurement, nor a result's fields by key."""
from __future__ import annotations

import math
from typing import Any, ClassVar, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

RESULT_ENV = "BISECTOR_RESULT"   # the variable naming the file a probe writes its result to
RESULT_MAX_BYTES = 8 << 20       # a bigger result file is refused (it is stored with every measurement)


class EnvFacts(BaseModel):
    """A candidate environment when a measurement used it."""

    path: str                                  # where it was built (on the machine that ran the probe)
    python: Optional[str] = None
    packages: dict[str, str] = {}              # name -> version: its own resolution, the base's, torch
    torch: Optional[str] = None                # torch's build version (local label kept: 2.11.0+cu130)
    torch_from: Optional[str] = None           # where that torch comes from
    torch_git: Optional[str] = None            # the commit that torch was built from (torch.version.git_version)
    repository_url: Optional[str] = None       # the repository the package's METADATA names


class Device(BaseModel):
    """What the probe ran on, as its result says (an object; every field optional, others a probe adds are kept).
    A result saying ``type`` is compared with the device the run measures on, and on CUDA its ``name`` with
    the run's GPUs: a result from another is a SKIP, never a number compared with the others. Reports show
    a GPU as its ``name`` and ``total_bytes`` with ``driver`` and ``cuda``, a CPU as its ``name`` and
    ``threads``."""

    model_config = ConfigDict(extra="allow")

    type: Optional[str] = Field(None, description='`"cpu"` or `"cuda"`: where the measured code ran. Another '
                                "than the run's device makes the measurement a SKIP (wrong device).")
    name: Optional[str] = Field(None, description="The GPU's model as torch names it (`NVIDIA H200`; on CUDA it "
                                "must be one of the run's GPUs), or the CPU's model name (`/proc/cpuinfo`).")
    uuid: Optional[str] = Field(None, description="CUDA: the GPU's UUID (`GPU-...`, `MIG-...` for a MIG "
                                "instance). Kept with the result.")
    driver: Optional[str] = Field(None, description="CUDA: the NVIDIA driver's version. Shown beside the GPU.")
    cuda: Optional[str] = Field(None, description="CUDA: the CUDA runtime torch was built with "
                                "(`torch.version.cuda`). Shown beside the GPU.")
    total_bytes: Optional[int] = Field(None, description="CUDA: the GPU's memory in bytes. Shown with its "
                                       'name ("NVIDIA H200, 139.8 GiB").')
    threads: Optional[int] = Field(None, description="CPU: the threads the probe computed with "
                                   "(`torch.get_num_threads()`). Shown with the CPU's name.")
    requested: Optional[str] = Field(None, description="The device the probe was asked for (`auto`, `cpu`, "
                                     "`cuda`). Kept with the result.")

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
    """What a probe writes to ``$BISECTOR_RESULT`` (the contract page, probes/CONTRACT.md, is rendered from this
    model: bisector.core.result_contract), and what a stored measurement keeps of it beside its metrics. Only
    ``metrics`` is required of a probe; built-in probes add the rest. A custom probe's field of one of these
    names but another type is left out of the typed view (:meth:`of`), never a crash; :meth:`fields` gives
    what it wrote."""

    model_config = ConfigDict(extra="allow")
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)
    REQUIRED: ClassVar[tuple[str, ...]] = ("metrics",)   # what a result file must hold

    metrics: dict[str, float] = Field({}, description="Name -> value, each a finite number (JSON has no NaN or "
                                      "infinity: a result with one is bad output, the measurement an error). "
                                      "What a run judges and compares; a metric the probe cannot compute is "
                                      "left out, never written as 0.")
    schema_version: Optional[Any] = Field(None, description="The shape of this probe's results "
                                          "(`ga_memory/2`, `command/1`): chooses the explainer that reads the "
                                          "other fields in reports.")
    probe: dict[str, Any] = Field({}, description="The probe's own `name`, `version`, `config_hash` and `config` "
                                  "(its effective settings): shown in the report; a `ga_memory` repro carries "
                                  "the `config` to check it ran in the same setting.")
    meter: Optional[str] = Field(None, description="What measured (`cpu-dispatch`, `cuda`, `rss`): every "
                                 "measurement of a run must have the meter of its first, else it is a SKIP; "
                                 "shown in the report's environment.")
    device: Device = Field(Device(), description="Where it ran: an object (below).")
    versions: dict[str, Any] = Field({}, description="Package -> version of the ML stack as the probe imported "
                                     "it (`torch`, `transformers`, ...): the report's environment prefers these "
                                     "to the environment's own record.")
    cells: list[dict[str, Any]] = Field([], description="Per-setting records (ga_memory: one per precision x GA "
                                        "x width), read by the probe's explainer.")
    oom_cells: list[Any] = Field([], description="The settings that ran out of memory while others were "
                                 "measured: the report names them.")
    cell_errors: int = Field(0, description="How many settings failed: the run's log counts them.")
    knobs: Optional[dict[str, Any]] = Field(None, description="The effective settings of the probe's loop: "
                                            "`bisector diff` reads them to name what differs.")
    error: Optional[str] = Field(None, description="Why the probe could not measure (exit non-zero too): the "
                                 "measurement's reason (an error; out of memory when it says so).")
    absent: dict[str, str] = Field({}, description="Metric -> why it is left out: a bisect or `bisector probe` "
                                   "on that metric shows the reason.")
    units: dict[str, str] = Field({}, description="Metric -> its unit (below), where the name's suffix does not "
                                  "say it: reports show the value in it.")
    missing_program: Optional[str] = Field(None, description="With `error`: a program the environment lacks "
                                           "and the probe must run. An environment failure (SKIP), not a "
                                           "crash.")

    @field_validator("metrics")
    @classmethod
    def _finite(cls, value: dict[str, float]) -> dict[str, float]:
        return finite_metrics(value)

    @classmethod
    def read(cls, data: Any) -> "ProbeResult":
        """A result file's content at the boundary: an object whose ``metrics`` map names to finite
        numbers (ValidationError otherwise: the measurement is bad output); the other fields typed as
        :meth:`of` types them."""
        if not isinstance(data, dict) or any(name not in data for name in cls.REQUIRED):
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
