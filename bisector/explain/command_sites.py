"""Where a user's program held the bytes of its step peak (``command/1``'s ``sites``), and which sites grew
between last good and first bad.

The command meter places every storage of at least its size floor (1 MiB by default) at the frame that
allocated it inside the package under test (``dtype [autograd node] | path:line func``) and pools the smaller
ones; the rows of a step's peak sum to it. Line numbers move between versions, so the two sides are compared
without them and shown with the first bad's (the culprit's code).
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from bisector.core.units import human_bytes
from bisector.explain.sites import BYTES_FLOOR

ROWS_KEPT = 12
SHOWN = 3
_LINE = re.compile(r":\d+(?=\s|$)")
_COUNT = re.compile(r" \(\d+\)$")   # "other sites (4)": pooled, whatever the count


def compact_sites(result: Mapping[str, Any]) -> dict:
    """``{"sites": [[site, bytes, largest, storages], ...], "sites_step": n}`` from a result (empty without)."""
    found = result.get("sites")
    if not isinstance(found, dict) or not isinstance(found.get("rows"), list):
        return {}
    rows = []
    for row in found["rows"][:ROWS_KEPT + 2]:
        if isinstance(row, dict) and isinstance(row.get("site"), str) and isinstance(row.get("bytes"), (int, float)):
            largest = row.get("largest") if isinstance(row.get("largest"), str) else None
            count = row.get("storages") if isinstance(row.get("storages"), int) else None
            rows.append([row["site"][:300], row["bytes"], largest and largest[:80], count])
    out: dict[str, Any] = {"sites": rows} if rows else {}
    if rows and isinstance(found.get("step"), int):
        out["sites_step"] = found["step"]
    return out


def _key(site: str) -> str:
    return _COUNT.sub("", _LINE.sub("", site))


Row = tuple[str, float, Optional[str], Optional[int]]   # (site as shown, bytes, largest storage, storages)


def _table(details: Mapping[str, Any]) -> Optional[dict[str, Row]]:
    rows = details.get("sites")
    if not isinstance(rows, list):
        return None
    out: dict[str, Row] = {}
    for row in rows:
        if isinstance(row, list) and len(row) == 4 and isinstance(row[0], str) and isinstance(row[1], (int, float)):
            key = _key(row[0])
            _, before, _, n = out.get(key, (row[0], 0.0, None, 0))
            count = (n or 0) + row[3] if isinstance(row[3], int) else None
            out[key] = (row[0], before + float(row[1]), row[2] if isinstance(row[2], str) else None, count)
    return out


def _name(site: str, largest: Optional[str], count: Optional[int]) -> str:
    """'transformers/models/llama/modeling_llama.py:1087 _update_causal_mask (3 float32 storages, the largest
    [2, 1, 2048, 2048])'; a pooled row as it is."""
    kind, _, where = site.partition(" | ")
    if not where:
        return site
    shape = largest.split(" ", 1)[1] if largest and " " in largest else None
    shape = shape and f"[{shape.replace('x', ', ')}]"
    if count and count > 1:
        what = f"{count} {kind} storages" + (f", the largest {shape}" if shape else "")
    else:
        what = kind + (f" {shape}" if shape else "")
    return f"{where} ({what})"


def one_version_sites(details: Mapping[str, Any]) -> list[str]:
    """'At the step peak (step 1), by allocation site: X 45.78 MiB (int64 3000000); ...' for one measurement."""
    table = _table(details)
    if not table:
        return []
    rows = sorted(table.values(), key=lambda r: -r[1])
    step = f" (step {details['sites_step']})" if isinstance(details.get("sites_step"), int) else ""
    parts = [f"{_name(site, largest, n)} {human_bytes(nbytes)}" for site, nbytes, largest, n in rows[:SHOWN + 2]]
    return [f"At the step peak{step}, by allocation site: " + "; ".join(parts) + "."]


def site_moves(good_details: Mapping[str, Any], bad_details: Mapping[str, Any]) -> list[str]:
    """'At the step peak, by allocation site (last good → first bad): X grew by 96.00 MiB (0 B → 96.00 MiB); ...':
    the sites that moved most in the direction the whole peak moved (line numbers compared away, the first
    bad's shown); nothing when either side has no sites."""
    good, bad = _table(good_details), _table(bad_details)
    if good is None or bad is None:
        return []
    total = sum(r[1] for r in bad.values()) - sum(r[1] for r in good.values())
    sign = 1 if total >= 0 else -1
    moves = []
    for key in {*good, *bad}:
        a, b = good.get(key, (key, 0.0, None, None)), bad.get(key)
        shown, after, largest, n = b if b is not None else (a[0], 0.0, a[2], a[3])
        change = after - a[1]
        if change * sign > BYTES_FLOOR:
            moves.append((-abs(change), shown, a[1], after, largest, n))
    if not moves:
        return []
    moves.sort()
    verb = "grew" if sign > 0 else "shrank"
    parts = [f"{_name(site, largest, n)} {verb} by {human_bytes(abs(after - before))} "
             f"({human_bytes(before)} → {human_bytes(after)})" for _, site, before, after, largest, n in moves[:SHOWN]]
    more = f" (and {len(moves) - SHOWN} more)" if len(moves) > SHOWN else ""
    return ["At the step peak, by allocation site (last good → first bad): " + "; ".join(parts) + more + "."]
