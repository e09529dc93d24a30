"""Numbers in a configuration are numbers: ``threshold = true`` or ``jobs = "3"`` is refused, never read as
1.0 or 3 (pydantic's lax mode would), and NaN or infinity is never a setting."""
from __future__ import annotations

import json
import math
from typing import Any

from pydantic import field_validator


def _no_loose_number(value: Any) -> Any:
    if isinstance(value, (bool, str)):
        raise ValueError(f"must be a number, not {json.dumps(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"must be a finite number, not {value}")
    return value


def numbers(*fields: str):
    """A ``before`` field validator for a model's numeric ``fields`` (assign it in the class body)."""
    return field_validator(*fields, mode="before")(_no_loose_number)
