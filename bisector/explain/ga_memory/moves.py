"""How ga_memory results moved between last good and first bad: a derived cost traced to the
(precision, GA) peaks behind it, and to the phase and allocation sites holding the peak of the cells
that moved (compared at the same phase kind, forward with forward)."""
from __future__ import annotations

from typing import Optional

from bisector.core.units import human_bytes, human_value
from bisector.explain.ga_memory.names import DERIVED, PEAK, VIEW_DERIVED, Group, metric_label, phase_kind
from bisector.explain.generic import TOL, joined, pair, unchanged
from bisector.explain.ga_memory.group_moves import (PER_PARAM_SHOWN, GroupMove, group_label, group_move, n_params_of,
                                                     peaks)
from bisector.explain.sites import site_sentence


def _terms(name: str, groups: set[Group]) -> list[tuple[int, Group]]:
    """(sign, group) making up a derived ga_memory metric; [] for anything else."""
    m = DERIVED.match(name or "")
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
    return f"the {joined(names)} peak" + ("s" if len(names) > 1 else "")


def _derived_sentence(metric: str, good: dict, bad: dict, terms: list[tuple[int, Group]],
                      moves: dict[Group, GroupMove]) -> str:
    a, b = good[metric], bad[metric]
    per_param = metric.endswith("bytes_per_param")
    parts = [moves[g] for _, g in terms]
    moved = sorted((m for m in parts if m.moved), key=lambda m: (-abs(m.per_param or 0), -m.rel))
    still = sorted(m for m in parts if not m.moved)
    label = metric_label(metric)
    if unchanged(metric, a, b):
        head = f"{label} did not change ({human_value(a, metric)})"
        link = " although " if moved else ""
    else:
        head = f"{label} {'rose' if b > a else 'fell'} by {human_value(abs(b - a), metric)}"
        link = " because "
    if moved:
        head += link + joined([f"the {group_label(m.group)} {m.phrase(per_param)}" for m in moved])
    elif link:
        head += f", yet none of the peaks it is derived from moved by more than {TOL:.0%}"
    if still:
        head += f"; {_peaks_phrase(still)} did not change" if moved or link else f", nor did {_peaks_phrase(still)}"
    return head + "."


def _others_sentence(others: list[GroupMove], after_derived: bool) -> list[str]:
    if not others:
        return []
    moved = [f"the {group_label(m.group)} {m.phrase(True)}" for m in others if m.moved]
    still = [m for m in others if not m.moved]
    parts = moved + ([f"{_peaks_phrase(still)} did not change"] if still else [])
    return [("Other peaks: " if after_derived else "Peaks: ") + "; ".join(parts) + "."]


def _costs_sentence(good: dict, bad: dict, metric: Optional[str]) -> list[str]:
    names = sorted((k for k in good if k in bad and k != metric and k.endswith("bytes_per_param")
                    and (DERIVED.match(k) or k.startswith("est_reserved_") and VIEW_DERIVED.match(k))),
                   key=lambda k: (k.startswith("est_"), k))  # the estimates after what was measured
    moved, still = [], []
    for k in names:
        a, b = good[k], bad[k]
        if unchanged(k, a, b):
            still.append(metric_label(k))
        else:
            moved.append(f"{metric_label(k)} {'rose' if b > a else 'fell'} by {human_value(abs(b - a), k)} "
                         f"({pair(k, a, b)})")
    parts = moved + ([f"{joined(still)} did not change"] if still else [])
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
    sites = _like_with_like(a, b, pb)
    if pa == pb:
        return [f"{what} peaks in {pa} on both sides ({size_a} → {size_b})."] + sites
    before = (a.get("phases") or {}).get(pb)
    was = f"; {pb} reached {human_bytes(before)} on the last good" if before is not None else ""
    return [f"{what} peaks in {pa} on the last good ({size_a}) but in {pb} on the first bad ({size_b}{was})."] + sites


def _like_with_like(a: dict, b: dict, peak_phase: str) -> list[str]:
    """Sites compared at the same phase kind on both sides (the first bad's peak phase), forward with
    forward; results without per-phase sites (ga_memory/1) compare each side's own peak."""
    kind = phase_kind(peak_phase)
    a_sites, b_sites = (a.get("phase_sites") or {}).get(kind), (b.get("phase_sites") or {}).get(kind)
    if a_sites is not None and b_sites is not None:
        return site_sentence(a_sites, b_sites, where=f"At the {kind}'s peak on both sides")
    return site_sentence(a.get("sites") or {}, b.get("sites") or {})


def _phase_targets(metric: Optional[str], terms: list[tuple[int, Group]],
                   moves: dict[Group, GroupMove]) -> list[tuple[Group, int]]:
    cell = PEAK.match(metric or "")
    if cell:
        return [((cell["prec"], int(cell["ga"])), int(cell["h"]))]
    chosen = [moves[g] for _, g in terms] or list(moves.values())
    chosen = sorted(chosen, key=lambda m: (not m.moved, -m.rel))
    return [(m.group, m.size) for m in chosen[:2]]


def caveats(good: dict, bad: dict) -> list[str]:
    out = _older_schema(good, bad)
    na, nb = n_params_of(good), n_params_of(bad)
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


def _older_schema(good: dict, bad: dict) -> list[str]:
    """Results stored by ga_memory 1 lack the per-phase peaks and fits: say what is compared without them."""
    lacking = [side for side, m in (("last good", good), ("first bad", bad))
               if not any(k.startswith("phase_peak_bytes.") for k in m)]
    if not lacking:
        return []
    return [f"The {' and '.join(lacking)} {'were' if len(lacking) > 1 else 'was'} measured by ga_memory 1 (schema "
            "ga_memory/1): no per-phase peaks, per-phase fits or bytes per token; only the step peaks are compared."]


def explain_moves(good: dict, bad: dict, metric: Optional[str], good_details: dict, bad_details: dict,
               groups: set[Group]) -> list[str]:
    n_params = n_params_of(good)
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


def _named(moves: list[GroupMove], all_groups: set[Group]) -> tuple[str, bool]:
    """('the GA=1 peaks', True) when the moves are every peak of one GA the metric reads, else
    ('the bf16 GA=1 and fp32 GA=1 peaks', plural)."""
    gas = {m.group[1] for m in moves}
    if len(moves) > 1 and len(gas) == 1 and {m.group for m in moves} == {g for g in all_groups if g[1] in gas}:
        return f"the GA={gas.pop()} peaks", True
    return _peaks_phrase(moves), len(moves) > 1


def _signed(m: GroupMove) -> str:
    """'-1.896 B/param' for a per-parameter move, '+32.00 MiB at h256' for any other."""
    if m.per_param is not None and not m.fixed and m.poor_fit is None and abs(m.per_param) > PER_PARAM_SHOWN:
        return f"{m.per_param:+.3f} B/param"
    return f"{'+' if m.delta >= 0 else '-'}{human_bytes(abs(m.delta))} at h{m.size}"


def peaks_behind(good: dict, bad: dict, metric: Optional[str]) -> Optional[str]:
    """What the peaks behind a derived metric did, for the verdict line: 'the GA=1 peaks fell (bf16
    -1.896 B/param, fp32 -0.652 B/param), the GA=2 peaks did not change; no peak rose'. None for a metric
    that is not derived from peaks, or when the sides share no peak of it."""
    if not metric or metric not in good or metric not in bad or unchanged(metric, good[metric], bad[metric]):
        return None
    groups = set(peaks(good)) & set(peaks(bad))
    n_params = n_params_of(good)
    moves = {g: m for g in sorted(groups) if (m := group_move(g, good, bad, n_params)) is not None}
    terms = [g for _, g in _terms(metric, set(moves)) if g in moves]
    if not terms:
        return None
    parts, rose = [], bad[metric] > good[metric]
    for word, picked in (("rose", [moves[g] for g in terms if moves[g].moved and moves[g].delta > 0]),
                         ("fell", [moves[g] for g in terms if moves[g].moved and moves[g].delta < 0])):
        if not picked:
            continue
        name, plural = _named(picked, set(terms))
        if name.startswith("the GA="):
            each = ", ".join(f"{m.group[0]} {_signed(m)}" for m in picked)
        else:
            each = ", ".join(_signed(m) for m in picked)
        parts.append(f"{name} {word} ({each})")
    still = [moves[g] for g in terms if not moves[g].moved]
    if still:
        parts.append(f"{_named(still, set(terms))[0]} did not change")
    if not any(moves[g].moved for g in terms):
        return f"none of the peaks it is derived from moved by more than {TOL:.0%}"
    same_way = [g for g in terms if moves[g].moved and (moves[g].delta > 0) == rose]
    text = ", ".join(parts)
    if not same_way:
        text += f"; no peak {'rose' if rose else 'fell'}"
    return text
