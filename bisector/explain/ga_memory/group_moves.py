"""Each (precision, GA) peak group's move between two ga_memory results, fitted over the model widths into a
per-parameter slope and a fixed part (a move whose size hardly varies over the widths is a fixed one)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bisector.core.units import human_bytes
from bisector.explain.ga_memory.names import PEAK, Group
from bisector.explain.generic import TOL, rel


def group_label(g: Group) -> str:
    return f"{g[0]} GA={g[1]} peak"


def peaks(metrics: dict) -> dict[Group, dict[int, float]]:
    out: dict[Group, dict[int, float]] = {}
    for name, value in metrics.items():
        m = PEAK.match(name)
        if m:
            out.setdefault((m["prec"], int(m["ga"])), {})[int(m["h"])] = value
    return out


@dataclass(order=True)
class GroupMove:
    """How one (precision, GA) peak moved between the sides, over the sizes both measured, and the fit
    of that move over the models' parameters (``change = per_param * params + fixed_bytes``)."""

    group: Group
    per_param: Optional[float]   # fitted change in B/param (None with fewer than two sizes)
    size: int                    # the size quoted: the largest relative move (the largest size if none)
    delta: float                 # change in bytes at that size
    pct: float                   # signed relative change at that size
    rel: float                   # largest relative change over all sizes
    fixed: bool = False          # the fit calls it fixed: bytes that do not follow the model's size
    fixed_bytes: float = 0.0     # the fit's fixed part (bytes)
    poor_fit: Optional[float] = None   # the fit's R² when no straight line over the parameters holds the move
    deltas: tuple = ()           # (size, change in bytes) at every size both measured

    @property
    def moved(self) -> bool:
        """Beyond the relative tolerance, or by a MiB or more: the meters count bytes exactly, and at a 7B
        model's 50 GiB peak 1% would hide a 500 MiB move (a causal mask's 128 MiB is 0.25%)."""
        return self.rel > TOL or max((abs(d) for _, d in self.deltas), default=abs(self.delta)) >= MOVED_BYTES

    def phrase(self, per_param: bool) -> str:
        """'fell by 1.500 B/param (-9% at h256)', 'rose by 32.00 MiB at every width (fixed bytes, ...)', the
        bytes at each width when the move is not a straight line over the parameters, or 'did not change'."""
        if not self.moved:
            return "did not change"
        word = "rose" if self.delta > 0 else "fell"
        where = f"{percent(self.pct)} at h{self.size}"
        if self.poor_fit is not None:
            each = ", ".join(f"{human_bytes(d) if d >= 0 else '-' + human_bytes(-d)} at h{h}" for h, d in self.deltas)
            return (f"moved by {each} ({where}): not a straight line over the parameters (fit R² "
                    f"{self.poor_fit:.2f}), so no per-parameter cost is quoted")
        if self.fixed:
            size = self.fixed_bytes if self.fixed_bytes and abs(self.fixed_bytes) >= 0.5 * abs(self.delta) else self.delta
            beside = ""
            if self.per_param and abs(self.per_param) > PER_PARAM_SHOWN:
                beside = f", {'+' if self.per_param > 0 else '-'}{abs(self.per_param):.3f} B/param beside it"
            return (f"{word} by {human_bytes(abs(size))} at every width (fixed bytes, not per parameter{beside}; "
                    f"{where})")
        if per_param and self.per_param is not None and abs(self.per_param) > 0:
            return f"{word} by {abs(self.per_param):.3f} B/param ({where})"
        return f"{word} by {human_bytes(abs(self.delta))} ({where})"


def percent(change: float) -> str:
    """'+19%', or '+0.25%' for a move under 1% (a large model's peak)."""
    return f"{change:+.0%}" if abs(change) >= 0.01 or change == 0 else f"{change:+.2%}"


MOVED_BYTES = 1 << 20  # a peak that moved by this much moved, however large the peak
FIXED_SPREAD = 0.05   # a change whose size varies by at most this much over the widths is a fixed one
POOR_R2 = 0.9         # below it (with a residual above POOR_RESIDUAL of the move) a fit quotes no slope
POOR_RESIDUAL = 0.10
PER_PARAM_SHOWN = 0.01   # B/param: a smaller slope beside a fixed move is not worth a mention


def _is_fixed(deltas: list[float]) -> bool:
    """Whether a change is the same at every width (a buffer whose size does not follow the model)."""
    if len(deltas) < 2:
        return False
    largest = max(abs(d) for d in deltas)
    return largest > 0 and (max(deltas) - min(deltas)) <= FIXED_SPREAD * largest


def line_fit(xs: list[float], ys: list[float]) -> Optional[tuple[float, float, float, float]]:
    """Least squares ``y = a x + b``: (a, b, R², the largest residual), or None without two distinct xs."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    b = my - a * mx
    residuals = [y - (a * x + b) for x, y in zip(xs, ys)]
    ss_tot = sum((y - my) ** 2 for y in ys)
    r2 = 1.0 - sum(r * r for r in residuals) / ss_tot if ss_tot > 0 else 1.0
    return a, b, r2, max(abs(r) for r in residuals)


def group_move(g: Group, good: dict, bad: dict, n_params: dict[int, float]) -> Optional[GroupMove]:
    """The move of group ``g`` (None when the sides share no size). The fit of the move over the
    parameters calls it fixed when its fixed part is larger than its per-parameter part at the
    largest model (or it is the same at every width), and poor when a straight line misses it."""
    a, b = peaks(good).get(g, {}), peaks(bad).get(g, {})
    sizes = sorted(set(a) & set(b))
    if not sizes:
        return None
    rels = [rel(a[h], b[h]) for h in sizes]
    top = max(range(len(sizes)), key=lambda i: (rels[i], i))
    deltas = [b[s] - a[s] for s in sizes]
    h = sizes[top] if rels[top] > TOL or abs(deltas[top]) >= MOVED_BYTES else sizes[-1]
    with_n = [s for s in sizes if s in n_params]
    fit = line_fit([n_params[s] for s in with_n], [b[s] - a[s] for s in with_n])
    pct = (b[h] - a[h]) / abs(a[h]) if a[h] else 0.0
    slope, fixed_part, poor = (fit[0], fit[1], None) if fit else (None, 0.0, None)
    fixed = _is_fixed(deltas)
    if fit is not None and not fixed:
        largest = max(abs(d) for d in deltas)
        if len(with_n) >= 3 and fit[2] < POOR_R2 and fit[3] > POOR_RESIDUAL * largest:
            poor = fit[2]
        elif abs(fixed_part) > abs(slope) * max(n_params[s] for s in with_n):
            fixed = True
    return GroupMove(g, slope, h, b[h] - a[h], pct, rels[top], fixed, fixed_part, poor, tuple(zip(sizes, deltas)))


def n_params_of(metrics: dict) -> dict[int, float]:
    out = {}
    for name, value in metrics.items():
        if name.startswith("n_params.h") and name[10:].isdigit():
            out[int(name[10:])] = value
    return out
