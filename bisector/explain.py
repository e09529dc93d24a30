"""Explain the move between the last good and the first bad candidate.

Input: both sides' ``metrics`` (``Point.metrics``) and, optionally, their compact probe details
(``Point.details``: per-cell peaks and the phase of the step holding each peak). Output: a few
plain-text sentences (the reports escape them).

Generic for any probe: the other metrics are ranked by relative change and the report says which
moved and which did not. With knowledge of the ``ga_memory`` probe's names: the per-cell peaks
``peak_bytes.<precision>.ga<k>.h<hidden>`` and the costs fitted from them (GA cost = GA=hi peak
minus GA=lo peak, mixed-precision cost = mixed GA=lo peak minus fp32 GA=lo peak, GA excess =
mixed GA cost minus fp32 GA cost), so a move of a derived cost is traced to the peaks behind it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from .sites import by_site, site_sentence
from .units import human_bytes, human_value

TOL = 0.01             # relative change at or below which a measurement "did not change"
PER_PARAM_FLOOR = 0.01  # B/param: smaller moves of a per-parameter cost count as unchanged
BYTES_FLOOR = 1024      # bytes: smaller moves of a byte count (a fitted fixed part, a peak) count as unchanged
_PEAK = re.compile(r"^peak_bytes\.(?P<prec>[A-Za-z0-9]+)\.ga(?P<ga>\d+)\.h(?P<h>\d+)$")
_DERIVED = re.compile(r"^(?:(?P<prec>[a-z0-9]+)_)?(?P<kind>ga_cost|ga_excess|mixed_cost)_"
                      r"(?P<unit>bytes_per_param|fixed_bytes)$")
_KIND_LABEL = {"ga_cost": "GA cost", "ga_excess": "GA excess", "mixed_cost": "mixed-precision cost"}
_CELL_KEYS = ("hidden", "precision", "ga", "n_params", "peak_bytes", "peak_phase", "error")

Group = tuple[str, int]   # (precision, gradient accumulation steps)


# -- labels --------------------------------------------------------------------------------
def metric_label(name: Optional[str]) -> str:
    """A human name for a metric: 'GA cost', 'bf16 GA=2 peak at h256'; other names unchanged."""
    if not name:
        return "verdict"
    peak = _PEAK.match(name)
    if peak:
        return f"{peak['prec']} GA={peak['ga']} peak at h{peak['h']}"
    derived = _DERIVED.match(name)
    if derived:
        label = _KIND_LABEL[derived["kind"]]
        label = f"{derived['prec']} {label}" if derived["prec"] else label
        return label if derived["unit"] == "bytes_per_param" else f"{label} (fixed part)"
    if name == "fit_r2_min":
        return "worst fit R²"
    return name


def _group_label(g: Group) -> str:
    return f"{g[0]} GA={g[1]} peak"


def _joined(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


# -- details kept per side ---------------------------------------------------------------------
def compact_details(result: Optional[dict]) -> dict:
    """The probe result's facts an explanation needs (cells with peaks and peak phases), small."""
    if not result:
        return {}
    out: dict[str, Any] = {}
    cells = [_compact_cell(c) for c in result.get("cells") or [] if isinstance(c, dict)]
    if cells:
        out["cells"] = cells
    if isinstance(result.get("peak_phase"), str):
        out["peak_phase"] = result["peak_phase"]
    phases = _phase_peaks(result.get("phases"))
    if phases:
        out["phases"] = phases
    return out


def _compact_cell(cell: dict) -> dict:
    out = {k: cell[k] for k in _CELL_KEYS if cell.get(k) is not None}
    phases = _phase_peaks(cell.get("phases"))
    if phases:
        out["phases"] = phases
    sites = by_site(cell.get("attribution")) if "sites" not in cell else cell["sites"]
    if sites:
        out["sites"] = sites
    return out


def _phase_peaks(phases: Any) -> dict[str, float]:
    """{phase: peak bytes} from {phase: {peak_bytes: ...}} or {phase: number}."""
    if not isinstance(phases, dict):
        return {}
    out = {}
    for name, rec in phases.items():
        value = rec.get("peak_bytes") if isinstance(rec, dict) else rec
        if isinstance(value, (int, float)):
            out[str(name)] = value
    return out


def point_details(measurements: Iterable[Any]) -> dict:
    """Compact details of the last successful measurement (the one ``Point.metrics`` shows last)."""
    ok = [m for m in measurements if m.status == "ok" and (m.details or {}).get("result")]
    return compact_details(ok[-1].details["result"]) if ok else {}


# -- generic -------------------------------------------------------------------------------
def _rel(a: float, b: float) -> float:
    scale = max(abs(a), abs(b))
    return abs(b - a) / scale if scale > 1e-12 else 0.0


def _unchanged(name: str, a: float, b: float) -> bool:
    if "bytes_per_param" in name:
        if abs(b - a) <= PER_PARAM_FLOOR:
            return True
    elif ("bytes" in name or name.startswith("peak")) and abs(b - a) <= BYTES_FLOOR:
        return True
    return _rel(a, b) <= TOL


def _pair(name: str, a: float, b: float) -> str:
    """'0.370 → 1.940 B/param' (the unit once when both sides share it)."""
    left, right = human_value(a, name), human_value(b, name)
    unit = right.rsplit(" ", 1)[-1] if " " in right else None
    if unit and left.endswith(" " + unit):
        left = left[: -len(unit) - 1]
    return f"{left} → {right}"


def _move(name: str, a: float, b: float) -> str:
    pct = f", {(b - a) / abs(a):+.0%}" if abs(a) > 1e-12 else ""
    return f"{metric_label(name)} {_pair(name, a, b)}{pct}"


def _generic(good: dict, bad: dict, metric: Optional[str], shown: int = 3) -> list[str]:
    names = [k for k in good if k in bad and k != metric]
    moved = sorted((k for k in names if not _unchanged(k, good[k], bad[k])),
                   key=lambda k: (-_rel(good[k], bad[k]), k))
    still = sorted(k for k in names if _unchanged(k, good[k], bad[k]))
    out = []
    if moved:
        more = f" (and {len(moved) - shown} more)" if len(moved) > shown else ""
        out.append("Moved with it: " + "; ".join(_move(k, good[k], bad[k]) for k in moved[:shown]) + more + ".")
    if still:
        more = [f"{len(still) - shown - 1} more"] if len(still) > shown + 1 else []
        shown_still = still if len(still) <= shown + 1 else still[:shown]
        out.append(f"{_joined([metric_label(k) for k in shown_still] + more)} did not change.")
    return out


def _top_phase(good_details: dict, bad_details: dict) -> list[str]:
    a, b = good_details.get("peak_phase"), bad_details.get("peak_phase")
    if not a or not b:
        return []
    if a == b:
        return [f"The peak sits in phase {a} on both sides."]
    return [f"The peak moved from phase {a} (last good) to phase {b} (first bad)."]


# -- ga_memory -------------------------------------------------------------------------------
def _peaks(metrics: dict) -> dict[Group, dict[int, float]]:
    out: dict[Group, dict[int, float]] = {}
    for name, value in metrics.items():
        m = _PEAK.match(name)
        if m:
            out.setdefault((m["prec"], int(m["ga"])), {})[int(m["h"])] = value
    return out


@dataclass(order=True)
class GroupMove:
    """How one (precision, GA) peak moved between the sides, over the sizes both measured."""

    group: Group
    per_param: Optional[float]   # fitted change in B/param (None with fewer than two sizes)
    size: int                    # the size quoted: the largest relative move (the largest size if none)
    delta: float                 # change in bytes at that size
    pct: float                   # signed relative change at that size
    rel: float                   # largest relative change over all sizes

    @property
    def moved(self) -> bool:
        return self.rel > TOL

    def phrase(self, per_param: bool) -> str:
        """'fell by 1.500 B/param (-9% at h256)' or 'did not change'."""
        if not self.moved:
            return "did not change"
        word = "rose" if self.delta > 0 else "fell"
        where = f"{self.pct:+.0%} at h{self.size}"
        if per_param and self.per_param is not None and abs(self.per_param) > 0:
            return f"{word} by {abs(self.per_param):.3f} B/param ({where})"
        return f"{word} by {human_bytes(abs(self.delta))} ({where})"


def _slope(xs: list[float], ys: list[float]) -> Optional[float]:
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def group_move(g: Group, good: dict, bad: dict, n_params: dict[int, float]) -> Optional[GroupMove]:
    """The move of group ``g`` (None when the sides share no size)."""
    a, b = _peaks(good).get(g, {}), _peaks(bad).get(g, {})
    sizes = sorted(set(a) & set(b))
    if not sizes:
        return None
    rels = [_rel(a[h], b[h]) for h in sizes]
    top = max(range(len(sizes)), key=lambda i: (rels[i], i))
    h = sizes[top] if rels[top] > TOL else sizes[-1]
    with_n = [s for s in sizes if s in n_params]
    slope = _slope([n_params[s] for s in with_n], [b[s] - a[s] for s in with_n])
    pct = (b[h] - a[h]) / abs(a[h]) if a[h] else 0.0
    return GroupMove(g, slope, h, b[h] - a[h], pct, rels[top])


def _n_params(metrics: dict) -> dict[int, float]:
    out = {}
    for name, value in metrics.items():
        if name.startswith("n_params.h") and name[10:].isdigit():
            out[int(name[10:])] = value
    return out


def _terms(name: str, groups: set[Group]) -> list[tuple[int, Group]]:
    """(sign, group) making up a derived ga_memory metric; [] for anything else."""
    m = _DERIVED.match(name or "")
    if not m or not groups:
        return []
    gas = sorted({g[1] for g in groups})
    lo, hi = gas[0], gas[-1]
    precs = {g[0] for g in groups}
    mixed = next((p for p in ("bf16", "fp16") if p in precs), None)
    prec = m["prec"] or mixed
    if m["kind"] == "ga_cost" and prec:
        return [(+1, (prec, hi)), (-1, (prec, lo))]
    if m["kind"] == "mixed_cost" and mixed:
        return [(+1, (mixed, lo)), (-1, ("fp32", lo))]
    if m["kind"] == "ga_excess" and mixed:
        return [(+1, (mixed, hi)), (-1, (mixed, lo)), (-1, ("fp32", hi)), (+1, ("fp32", lo))]
    return []


def _peaks_phrase(moves: list[GroupMove]) -> str:
    """'the fp32 GA=1 peak' / 'the fp32 GA=1 and fp32 GA=2 peaks'."""
    names = [f"{m.group[0]} GA={m.group[1]}" for m in moves]
    return f"the {_joined(names)} peak" + ("s" if len(names) > 1 else "")


def _derived_sentence(metric: str, good: dict, bad: dict, terms: list[tuple[int, Group]],
                      moves: dict[Group, GroupMove]) -> str:
    a, b = good[metric], bad[metric]
    per_param = metric.endswith("bytes_per_param")
    parts = [moves[g] for _, g in terms]
    moved = sorted((m for m in parts if m.moved), key=lambda m: (-abs(m.per_param or 0), -m.rel))
    still = sorted(m for m in parts if not m.moved)
    label = metric_label(metric)
    if _unchanged(metric, a, b):
        head = f"{label} did not change ({human_value(a, metric)})"
        link = " although " if moved else ""
    else:
        head = f"{label} {'rose' if b > a else 'fell'} by {human_value(abs(b - a), metric)}"
        link = " because "
    if moved:
        head += link + _joined([f"the {_group_label(m.group)} {m.phrase(per_param)}" for m in moved])
    elif link:
        head += f", yet none of the peaks it is derived from moved by more than {TOL:.0%}"
    if still:
        head += f"; {_peaks_phrase(still)} did not change" if moved or link else f", nor did {_peaks_phrase(still)}"
    return head + "."


def _others_sentence(others: list[GroupMove], after_derived: bool) -> list[str]:
    if not others:
        return []
    moved = [f"the {_group_label(m.group)} {m.phrase(True)}" for m in others if m.moved]
    still = [m for m in others if not m.moved]
    parts = moved + ([f"{_peaks_phrase(still)} did not change"] if still else [])
    return [("Other peaks: " if after_derived else "Peaks: ") + "; ".join(parts) + "."]


def _costs_sentence(good: dict, bad: dict, metric: Optional[str]) -> list[str]:
    names = sorted(k for k in good if k in bad and k != metric and _DERIVED.match(k)
                   and k.endswith("bytes_per_param"))
    moved, still = [], []
    for k in names:
        a, b = good[k], bad[k]
        if _unchanged(k, a, b):
            still.append(metric_label(k))
        else:
            moved.append(f"{metric_label(k)} {'rose' if b > a else 'fell'} by {human_value(abs(b - a), k)} "
                         f"({_pair(k, a, b)})")
    parts = moved + ([f"{_joined(still)} did not change"] if still else [])
    return ["Other costs: " + "; ".join(parts) + "."] if parts else []


def _cell(cells: list, g: Group, h: int) -> Optional[dict]:
    for c in cells or []:
        if (c.get("precision"), c.get("ga"), c.get("hidden")) == (g[0], g[1], h) and c.get("peak_phase"):
            return c
    return None


def _phase_sentence(g: Group, h: int, good_details: dict, bad_details: dict) -> list[str]:
    a, b = _cell(good_details.get("cells"), g, h), _cell(bad_details.get("cells"), g, h)
    if a is None or b is None:
        return []
    what = f"The {g[0]} GA={g[1]} step at h{h}"
    pa, pb = a["peak_phase"], b["peak_phase"]
    size_a, size_b = human_bytes(a.get("peak_bytes", 0)), human_bytes(b.get("peak_bytes", 0))
    sites = site_sentence(a.get("sites") or {}, b.get("sites") or {})
    if pa == pb:
        return [f"{what} peaks in {pa} on both sides ({size_a} → {size_b})."] + sites
    before = (a.get("phases") or {}).get(pb)
    was = f"; {pb} reached {human_bytes(before)} on the last good" if before is not None else ""
    return [f"{what} peaks in {pa} on the last good ({size_a}) but in {pb} on the first bad ({size_b}{was})."] + sites


def _phase_targets(metric: Optional[str], terms: list[tuple[int, Group]],
                   moves: dict[Group, GroupMove]) -> list[tuple[Group, int]]:
    cell = _PEAK.match(metric or "")
    if cell:
        return [((cell["prec"], int(cell["ga"])), int(cell["h"]))]
    chosen = [moves[g] for _, g in terms] or list(moves.values())
    chosen = sorted(chosen, key=lambda m: (not m.moved, -m.rel))
    return [(m.group, m.size) for m in chosen[:2]]


def _caveats(good: dict, bad: dict) -> list[str]:
    out = []
    na, nb = _n_params(good), _n_params(bad)
    differ = [h for h in sorted(set(na) & set(nb)) if na[h] != nb[h]]
    if differ:
        h = differ[0]
        out.append(f"The models differ between the sides (h{h}: {na[h]:,.0f} → {nb[h]:,.0f} parameters): "
                   "part of the move may be the model, not the training step.")
    r2 = [(v, side) for side, m in (("last good", good), ("first bad", bad))
          for v in [m.get("fit_r2_min")] if v is not None]
    worst = min(r2, default=None)
    if worst is not None and worst[0] < 0.99:
        out.append(f"The straight-line fit over sizes is loose (worst R² {worst[0]:.3f}, {worst[1]}): "
                   "per-parameter costs are approximate.")
    return out


def _ga_memory(good: dict, bad: dict, metric: Optional[str], good_details: dict, bad_details: dict,
               groups: set[Group]) -> list[str]:
    n_params = _n_params(good)
    moves = {g: m for g in sorted(groups) if (m := group_move(g, good, bad, n_params)) is not None}
    terms = [t for t in _terms(metric or "", set(moves)) if t[1] in moves]
    out = []
    if terms and metric in good and metric in bad:
        out.append(_derived_sentence(metric, good, bad, terms, moves))
    inside = {g for _, g in terms}
    out += _others_sentence([moves[g] for g in moves if g not in inside], bool(inside))
    out += _costs_sentence(good, bad, metric)
    for g, h in _phase_targets(metric, terms, moves):
        out += _phase_sentence(g, h, good_details, bad_details)
    return out


def explain(good: Optional[dict], bad: Optional[dict], metric: Optional[str] = None,
            good_details: Optional[dict] = None, bad_details: Optional[dict] = None) -> list[str]:
    """Sentences saying which measurements moved between last good (``good``) and first bad (``bad``)."""
    good, bad = good or {}, bad or {}
    good_details, bad_details = good_details or {}, bad_details or {}
    if not good or not bad:
        return []
    groups = set(_peaks(good)) & set(_peaks(bad))
    if not groups:
        return _generic(good, bad, metric) + _top_phase(good_details, bad_details)
    return _ga_memory(good, bad, metric, good_details, bad_details, groups) + _caveats(good, bad)


def explain_points(last_good: Any, first_bad: Any, metric: Optional[str]) -> list[str]:
    """``explain`` for two ``Point``s (empty when either is missing)."""
    if last_good is None or first_bad is None:
        return []
    return explain(last_good.metrics, first_bad.metrics, metric, last_good.details, first_bad.details)
