"""The story of a numbers culprit (a loss, a gradient norm, an update norm the command meter read): each step's
numbers at last good and first bad side by side, the first step where they part and by how much, and for a loss
whether the gradients changed too (a loss that changed while every gradient stayed is the loss the program
reports, not its training), for a gradient norm whether the loss did.

Input: the ``numbers`` a command result's explainer keeps of its first steps (:func:`compact`).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional

SERIES = ("loss", "grad_norm", "update_norm")
STEPS_KEPT = 12
STEPS_SHOWN = 4
SAME = 1e-6   # relative: two reads this close are the same number (float32 sums in another order differ by less)
WORDS = ("nan", "inf", "-inf")


def is_numbers_metric(metric: Optional[str]) -> bool:
    """Whether ``metric`` (or its ``.rank<N>``) is one of the numbers of the program's steps."""
    base = (metric or "").split(".rank", 1)[0]
    return base.startswith(SERIES) or base == "nonfinite_steps"


def _kept(value: Any):
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return value if value in WORDS else None


def compact(steps: Any) -> dict:
    """{"numbers": {series: [value or word or None per step]}} of the first steps, where any was read."""
    rows = [s for s in steps if isinstance(s, dict)][:STEPS_KEPT] if isinstance(steps, list) else []
    numbers = {name: [_kept(s.get(name)) for s in rows] for name in SERIES}
    numbers = {name: values for name, values in numbers.items() if any(v is not None for v in values)}
    return {"numbers": numbers} if numbers else {}


def _shown(value: Any) -> str:
    return "-" if value is None else value if isinstance(value, str) else f"{value:.6g}"


def _change(a: Any, b: Any) -> Optional[str]:
    """How b differs from a ('+60.3%', 'nan'), or None when they are the same number."""
    if a is None or b is None:
        return None
    if isinstance(a, str) or isinstance(b, str):
        return None if a == b else "not finite on one side"
    if a == b or abs(b - a) <= SAME * max(abs(a), abs(b)):
        return None
    return _pct(a, b)


def _pct(a: float, b: float) -> str:
    if a == 0:
        return f"{b - a:+.3g}"
    pct = (b - a) / abs(a) * 100
    return f"{pct:+.2f}%" if abs(pct) >= 0.01 else f"{pct:+.2e}%"


def _parts(good: Mapping[str, list], bad: Mapping[str, list], shown: bool) -> Optional[tuple[int, list[str]]]:
    """(the first step where a series differs, 'grad_norm +60.30%' for each that does: with its values
    'grad_norm 6.0498 → 9.69737 (+60.30%)' where that step's line is not ``shown``)."""
    names = [n for n in SERIES if n in good and n in bad]
    steps = min((min(len(good[n]), len(bad[n])) for n in names), default=0)
    for i in range(steps):
        said = shown and i < STEPS_SHOWN
        moved = [f"{n} {_change(good[n][i], bad[n][i])}" if said else
                 f"{n} {_shown(good[n][i])} → {_shown(bad[n][i])} ({_change(good[n][i], bad[n][i])})"
                 for n in names if _change(good[n][i], bad[n][i])]
        if moved:
            return i, moved
    return None


def _step_line(i: int, good: Mapping[str, list], bad: Mapping[str, list]) -> str:
    cells = []
    for n in SERIES:
        a = good.get(n, [])[i] if i < len(good.get(n, [])) else None
        b = bad.get(n, [])[i] if i < len(bad.get(n, [])) else None
        if a is None and b is None:
            continue
        moved = _change(a, b)
        cells.append(f"{n} {_shown(a)} → {_shown(b)} ({moved})" if moved else f"{n} {_shown(a)} (the same)")
    return f"step {i}: " + ", ".join(cells) + "."


def _differs(good: Mapping[str, list], bad: Mapping[str, list], name: str) -> Optional[tuple[int, str]]:
    """(the first step where series ``name`` differs, its change) or None; KeyError when a side lacks it."""
    a, b = good[name], bad[name]
    for i in range(min(len(a), len(b))):
        if a[i] is None or b[i] is None:
            raise KeyError(name)
        moved = _change(a[i], b[i])
        if moved:
            return i, f"{name} {_shown(a[i])} → {_shown(b[i])} at step {i}, {moved}"
    return None


def _other_side(metric: str, good: Mapping[str, list], bad: Mapping[str, list]) -> list[str]:
    """For a loss: did the gradients change too? For a gradient or update norm: did the loss?"""
    base = metric.split(".rank", 1)[0]
    other = "grad_norm" if base.startswith("loss") else "loss" if base.startswith(("grad_norm", "update_norm")) else None
    if other is None:
        return []
    try:
        moved = _differs(good, bad, other)
    except KeyError:
        return [f"Whether the {'gradients' if other == 'grad_norm' else 'loss'} changed too is not known: "
                f"{other} was not read at both sides' steps."]
    kept = min(len(good[other]), len(bad[other]))
    if other == "grad_norm":
        if moved:
            return [f"The gradients changed too ({moved[1]}): a training change, not only the loss it reports."]
        return [f"The gradients did not change (grad_norm the same at each of the {kept} steps kept): only the loss "
                "the program reports changed, not its training."]
    if moved:
        return [f"The loss changed too ({moved[1]})."]
    return [f"The loss did not change (the same at each of the {kept} steps kept): the same loss gives other "
            "gradients (the backward, or what the optimizer is given, changed)."]


def story(metric: Optional[str], good_details: Mapping[str, Any], bad_details: Mapping[str, Any]) -> list[str]:
    """The lines a numbers culprit's report and ``--explain`` lead with (empty for any other metric)."""
    if not is_numbers_metric(metric):
        return []
    good, bad = good_details.get("numbers") or {}, bad_details.get("numbers") or {}
    if not good or not bad:
        return ["The per-step numbers were not kept for both sides (measured before the meter read them)."]
    rank = f" (rank {metric.split('.rank', 1)[1]}'s metric; these are the lowest rank's steps)" if ".rank" in metric \
        else ""
    steps = max(len(v) for v in (*good.values(), *bad.values()))
    out = [f"Each step's numbers, last good → first bad{rank}:"]
    out += [_step_line(i, good, bad) for i in range(min(steps, STEPS_SHOWN))]
    if steps > STEPS_SHOWN:
        out.append(f"(and {steps - STEPS_SHOWN} more steps kept: --format json has them all)")
    parted = _parts(good, bad, shown=True)
    if parted is None:
        out.append(f"The {steps} steps kept are the same on both sides (to {SAME:g}): the change is in a later step.")
    else:
        i, moved = parted
        first = " (the first optimizer step)" if i == 0 else ""
        out.append(f"They part at step {i}{first}: {', '.join(moved)}.")
    return out + _other_side(metric, good, bad)


def one_version(details: Mapping[str, Any]) -> list[str]:
    """``bisector probe --explain``: the numbers of each step kept, one line."""
    numbers = details.get("numbers") or {}
    if not numbers:
        return []
    steps = max(len(v) for v in numbers.values())
    cells = "; ".join(f"step {i}: " + ", ".join(f"{n} {_shown(numbers[n][i])}" for n in numbers
                                                 if i < len(numbers[n]) and numbers[n][i] is not None)
                      for i in range(min(steps, STEPS_SHOWN)))
    more = f" (and {steps - STEPS_SHOWN} more steps)" if steps > STEPS_SHOWN else ""
    return [f"Numbers per optimizer step (warm-up included): {cells}{more}."]
