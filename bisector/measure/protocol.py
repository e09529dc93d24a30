"""The probe's result file (the JSON written to $BISECTOR_RESULT), validated at the boundary."""
from __future__ import annotations

import math
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, field_validator

RESULT_ENV = "BISECTOR_RESULT"


class ProbeResult(BaseModel):
    """What a probe writes. Only ``metrics`` is required (the custom-probe contract).

    Built-in probes add ``schema_version``, ``probe`` (name, version, config hash), ``versions``
    of the ML stack, ``device``/``meter`` facts, per-cell ``cells`` and per-phase details.
    """

    model_config = ConfigDict(extra="allow")

    metrics: dict[str, float]
    schema_version: Optional[str] = None
    probe: Optional[dict[str, Any]] = None
    versions: Optional[dict[str, Optional[str]]] = None
    device: Optional[dict[str, Any]] = None
    meter: Optional[str] = None
    cells: Optional[list[dict[str, Any]]] = None
    error: Optional[str] = None

    @field_validator("metrics")
    @classmethod
    def _finite(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [k for k, v in value.items() if not math.isfinite(v)]
        if bad:
            raise ValueError(f"non-finite metric values: {', '.join(sorted(bad))}")
        return value
