"""Human units for metric values. A metric's unit comes from its probe, never from a guess: the unit the
probe's result declares for it (``"units": {"latency": "ms"}``), else its name's suffix (``_bytes``,
``_mib``, ``_seconds``, ``_ms``, ``_bytes_per_param`` ...; after the suffix a statistic such as ``_max`` may
follow, and dotted qualifiers such as ``.fp32`` or ``.rank1``; ``_per_s`` is a rate, not seconds), else
none: the bare number.

Declared units are collected as measurements arrive (:func:`declare`) and travel with a stored result
(``BisectResult.units``), so a report printed later shows the same units.
"""
from __future__ import annotations

import re
import threading
from typing import Any, Mapping, Optional


def human_bytes(value: float) -> str:
    sign = "-" if value < 0 else ""
    v = abs(value)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= size:
            return f"{sign}{v / size:.2f} {unit}"
    return f"{sign}{v:.0f} B"


# a unit's canonical name: what a declared unit (any case) or a name's suffix means
_CANONICAL = {"b": "bytes", "byte": "bytes", "bytes": "bytes", "kib": "KiB", "mib": "MiB", "gib": "GiB",
              "kb": "kB", "mb": "MB", "gb": "GB", "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
              "ms": "ms", "us": "us", "µs": "us", "ns": "ns", "count": "", "": "",
              "b/param": "B/param", "bytes_per_param": "B/param", "b/token": "B/token", "bytes_per_token": "B/token"}
_SUFFIXES = ("bytes_per_param", "bytes_per_token", "bytes", "kib", "mib", "gib", "kb", "mb", "gb", "seconds", "s",
             "ms", "us", "ns")
_RATE = re.compile(r"(^|_)per_[a-z0-9]+$")
_STATISTIC = re.compile(r"_(min|max|mean|median|avg|std|p\d{1,2})$")
_DECLARABLE = re.compile(r"^[A-Za-z0-9%/µ°_ .\-]{1,16}$")   # a declared unit shown as written (foreign text)
_declared: dict[str, str] = {}
_lock = threading.Lock()


def declarable_units() -> list[str]:
    """The units a probe may declare by name, as shown ("" is a count), besides a short word of its own."""
    return list(dict.fromkeys(_CANONICAL.values()))


def suffix_units() -> dict[str, str]:
    """Each name suffix that gives a metric its unit when the probe declares none, and that unit."""
    return {suffix: _CANONICAL[suffix] for suffix in _SUFFIXES}


def unit_of(unit: Any) -> Optional[str]:
    """A declared unit as shown ("bytes", "MiB", "s", "" for a count, or the probe's own short word);
    None when it is no unit we can show."""
    if not isinstance(unit, str):
        return None
    canonical = _CANONICAL.get(unit.strip().lower())
    if canonical is not None:
        return canonical
    return unit.strip() if _DECLARABLE.match(unit.strip()) else None


def declare(units: Any) -> None:
    """Remember the units a probe result declares (metric name -> unit); anything else is ignored."""
    if not isinstance(units, Mapping):
        return
    shown = {str(k): unit_of(v) for k, v in list(units.items())[:10_000] if isinstance(k, str)}
    with _lock:
        _declared.update({k: v for k, v in shown.items() if v is not None})


def declared(names) -> dict[str, str]:
    """The declared units of ``names`` (those that have one): what a stored result keeps."""
    with _lock:
        return {k: _declared[k] for n in names for k in (n, n.split(".", 1)[0]) if k in _declared}


def metric_unit(metric: Optional[str]) -> str:
    """The unit of ``metric`` as shown ("" for none): declared (the full name, else its first dotted part),
    else its name's suffix."""
    if not metric:
        return ""
    base = metric.split(".", 1)[0]
    with _lock:
        found = _declared.get(metric, _declared.get(base))
    if found is not None:
        return found
    stem = _STATISTIC.sub("", base.lower())
    if _RATE.search(stem) and not stem.endswith(("bytes_per_param", "bytes_per_token")):
        return ""   # tokens_per_s is a rate, not seconds: no unit the probe did not declare
    for suffix in _SUFFIXES:
        if stem == suffix or stem.endswith("_" + suffix):
            return _CANONICAL[suffix]
    return ""


def human_value(value: float, metric: Optional[str] = None) -> str:
    """Format a metric value in its unit (:func:`metric_unit`); without one, the bare number."""
    unit = metric_unit(metric)
    if unit == "bytes":
        return human_bytes(value)
    if unit == "s":
        return f"{value:.3f} s"
    if unit == "B/param":
        return f"{value:.3f} B/param"
    if unit in ("KiB", "MiB", "GiB", "kB", "MB", "GB", "ms", "us", "ns", "B/token"):
        return f"{value:.1f} {unit}"
    return f"{value:.6g} {unit}" if unit else f"{value:.6g}"
