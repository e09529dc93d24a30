"""Allocation sites at a step's peak (the ga_memory probe's attribution), compared between last good and first bad.

The ``ga_memory`` probe's CPU meter records, for each cell, the bytes live at the peak by
allocation site (``float32 ToCopyBackward0 | accelerate/accelerator.py:2001 backward``, and
``pre-existing`` for tensors that existed before the meter started: parameters, buffers).
Line numbers move between versions, so sites are compared without them.
"""
from __future__ import annotations

import re
from typing import Any

from bisector.core.units import human_bytes

BYTES_FLOOR = 1024          # smaller moves of one site are not mentioned
_LINE = re.compile(r":\d+(?=\s|$)")
_LABELS = {"pre-existing": "tensors from before the meter started (parameters, buffers)"}


def by_site(rows: Any) -> dict[str, float]:
    """{site without line numbers: bytes} from the probe's attribution rows (other rows ignored)."""
    out: dict[str, float] = {}
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict) or not isinstance(row.get("site"), str):
            continue
        if not isinstance(row.get("bytes"), (int, float)) or row["site"].startswith("("):
            continue  # "(N other sites)": not one site
        site = _LINE.sub("", row["site"])
        out[site] = out.get(site, 0.0) + float(row["bytes"])
    return out


def _label(site: str) -> str:
    if site in _LABELS:
        return _LABELS[site]
    kind, _, where = site.partition(" | ")
    return f"{kind} from {where}" if where else site


def site_changes(a_sites: dict[str, float], b_sites: dict[str, float], top: int = 3) -> tuple[list[str], list[str]]:
    """(the sites that moved most, as 'X rose by 1.9 MiB (0 B → 1.9 MiB)', and the largest holders
    that did not move, as 'Y at 6.5 MiB') from side a to side b."""
    rows = [(site, a_sites.get(site, 0.0), b_sites.get(site, 0.0)) for site in {*a_sites, *b_sites}]
    moved = sorted((r for r in rows if abs(r[2] - r[1]) > BYTES_FLOOR), key=lambda r: (-abs(r[2] - r[1]), r[0]))
    still = sorted((r for r in rows if abs(r[2] - r[1]) <= BYTES_FLOOR and r[2] > BYTES_FLOOR),
                   key=lambda r: (-r[2], r[0]))
    parts = [f"{_label(site)} {'rose' if b > a else 'fell'} by {human_bytes(abs(b - a))} "
             f"({human_bytes(a)} → {human_bytes(b)})" for site, a, b in moved[:top]]
    return parts, [f"{_label(site)} at {human_bytes(b)}" for site, _, b in still[:2]]


def site_sentence(good_sites: dict[str, float], bad_sites: dict[str, float], top: int = 3,
                  where: str = "At each side's peak") -> list[str]:
    """'At each side's peak, by allocation site: X fell by 1.9 MiB (...); unchanged: Y (6.5 MiB)':
    the sites that moved most, and the largest holders that did not move (context for the reader)."""
    parts, kept = site_changes(good_sites, bad_sites, top)
    if not parts:
        return []
    unchanged = f"; unchanged: {', '.join(kept)}" if kept else ""
    return [f"{where}, by allocation site (line numbers dropped): " + "; ".join(parts) + unchanged + "."]
