"""Human units for metric values: bytes as MiB/GiB, per-param costs as B/param."""
from __future__ import annotations

import re
from typing import Optional


def human_bytes(value: float) -> str:
    sign = "-" if value < 0 else ""
    v = abs(value)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= size:
            return f"{sign}{v / size:.2f} {unit}"
    return f"{sign}{v:.0f} B"


_UNIT_SUFFIXES = (("_kib", "KiB"), ("_mib", "MiB"), ("_gib", "GiB"), ("_kb", "kB"), ("_mb", "MB"), ("_gb", "GB"),
                  ("_ms", "ms"))


def human_value(value: float, metric: Optional[str] = None) -> str:
    """Format a metric value using its name's unit hint."""
    base = metric.split(".", 1)[0] if metric else ""
    for suffix, unit in _UNIT_SUFFIXES:   # a unit the name declares: peak_rss_mib is MiB, never bytes
        if base.endswith(suffix):
            return f"{value:.1f} {unit}"
    if metric and "bytes_per_param" in metric:
        return f"{value:.3f} B/param"
    if metric and "bytes_per_token" in metric:
        return f"{value:.1f} B/token"
    if metric and ("bytes" in metric or metric.startswith("peak")):
        return human_bytes(value)
    if metric and (metric.endswith(("seconds", "_s")) or re.search(r"(^|_)seconds(_|$)", metric.split(".", 1)[0])):
        return f"{value:.3f} s"   # step_seconds, step_seconds_max.fp32, import_seconds
    return f"{value:.6g}"
