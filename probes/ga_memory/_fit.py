"""Fits over model sizes (and sequence lengths) and the probe's derived metrics.

Every quantity is fitted by least squares over the cells of one (precision, GA) group as
``bytes = a * n_params + b`` or, when the cells span several sequence lengths (the token axis),
``bytes = a * n_params + c * tokens + b``: ``a`` is the per-parameter cost, ``c`` the per-token
cost, ``b`` the fixed cost. Differences (GA cost, mixed-precision cost, excess) are fitted on the
per-cell differences, which equals the difference of the fitted planes over the same cells. With
a single model size there is no slope to fit; the cost is then the difference divided by the
parameters, as the seed report computed it (``kind: ratio``, no fixed part).

Only groups measured at every planned (size, sequence length) enter a fit: a cost fitted over the
cells that happened to survive would be a different number under the same name.
"""
from __future__ import annotations

import math

PHASE_KINDS = ("forward", "backward", "step", "zero_grad")
# other views of the step peak: the CUDA meter's (what tensors asked for, what the allocator reserved)
# and the allocator model's from the CPU trace (estimated allocated and reserved); each gets the costs too
ALLOCATOR = ("requested", "reserved", "est_allocated", "est_reserved")


def fit_line(xs, ys) -> dict:
    """Least squares ``y = a x + b``; r2 = 1 - SS_res/SS_tot (1.0 when y is exactly fitted)."""
    if len(xs) < 2 or len(set(xs)) < 2:
        raise ValueError("need at least two distinct x values")
    return fit_plane(xs, [0.0] * len(xs), ys)


def fit_plane(xs, ts, ys) -> dict:
    """Least squares ``y = a x + c t + b`` (``c`` only when ``t`` varies), with r2 and residuals."""
    n = len(xs)
    mx, mt, my = sum(xs) / n, sum(ts) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    stt = sum((t - mt) ** 2 for t in ts)
    sxt = sum((x - mx) * (t - mt) for x, t in zip(xs, ts))
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sty = sum((t - mt) * (y - my) for t, y in zip(ts, ys))
    det = sxx * stt - sxt * sxt
    if stt == 0 and sxx == 0:
        raise ValueError("need at least two distinct sizes or sequence lengths")
    if stt == 0:
        a, c = sxy / sxx, None
    elif sxx == 0:  # one model size: only the per-token slope is identifiable
        a, c = None, sty / stt
    elif abs(det) <= 1e-12 * sxx * stt:
        raise ValueError("sizes and sequence lengths do not vary independently")
    else:
        a, c = (sxy * stt - sty * sxt) / det, (sty * sxx - sxy * sxt) / det
    b = my - (a or 0.0) * mx - (c or 0.0) * mt
    residuals = [y - ((a or 0.0) * x + (c or 0.0) * t + b) for x, t, y in zip(xs, ts, ys)]
    ss_res, ss_tot = sum(r * r for r in residuals), sum((y - my) ** 2 for y in ys)
    if ss_tot == 0:
        r2 = 1.0 if ss_res <= 1e-9 * max(1.0, my * my) else 0.0
    else:
        r2 = 1.0 - ss_res / ss_tot
    out = {"b": b, "r2": r2, "n": n, "max_abs_residual": max(abs(r) for r in residuals)}
    for key, value in (("a", a), ("c", c)):
        if value is not None:
            out[key] = value
    return out


def phase_kind(name: str) -> str:
    """'m1.forward' -> 'forward', 'step' -> 'step', 'm0.zero_grad#2' -> 'zero_grad'."""
    return name.split("#", 1)[0].rsplit(".", 1)[-1]


def phase_peaks(cell) -> dict:
    """{phase kind: the largest peak of that kind over the cell's micro-steps}."""
    out = {}
    for name, record in (cell.get("phases") or {}).items():
        kind = phase_kind(name)
        out[kind] = max(out.get(kind, 0), record["peak_bytes"])
    return out


class Grid:
    """The measured cells as ``{(precision, ga, phase): {(hidden, seq_len): bytes}}``; phase
    ``peak`` is the whole step. ``x`` maps (hidden, seq_len) to (n_params, tokens)."""

    def __init__(self, cells):
        self.values, self.x = {}, {}
        self.planned = {(c["hidden"], c.get("seq_len", 0)) for c in cells}
        self.seq_lens = sorted({c.get("seq_len", 0) for c in cells})
        for c in cells:
            if c.get("error") or "peak_bytes" not in c:
                continue
            point = (c["hidden"], c.get("seq_len", 0))
            self.x[point] = (c["n_params"], c.get("tokens", 0))
            allocator = {kind: c[f"{kind}_peak_bytes"] for kind in ALLOCATOR if f"{kind}_peak_bytes" in c}
            for phase, value in {"peak": c["peak_bytes"], **phase_peaks(c), **allocator}.items():
                self.values.setdefault((c["precision"], c["ga"], phase), {})[point] = value

    def complete(self, group) -> dict:
        """The group's values when every planned cell was measured, else {}."""
        values = self.values.get(group, {})
        return values if set(values) == self.planned else {}

    def fit(self, values):
        """Fit of ``values`` (a complete point -> bytes map), or None when nothing can be fitted."""
        points = sorted(values)
        if not points:
            return None
        xs = [self.x[p][0] for p in points]
        ts = [self.x[p][1] for p in points]
        ys = [values[p] for p in points]
        if len(set(xs)) >= 2 or len(set(ts)) >= 2:
            return fit_plane(xs, ts, ys)
        if len(points) == 1:  # one model, one length: bytes per parameter as a ratio, no fixed part
            return {"kind": "ratio", "a": ys[0] / xs[0], "n": 1}
        return None


def _cell_name(h, t, multi_t) -> str:
    return f"h{h}.t{t}" if multi_t else f"h{h}"


def _cell_metrics(grid: Grid) -> dict:
    multi_t = len(grid.seq_lens) > 1
    metrics = {f"n_params.h{h}": float(n) for (h, _), (n, _) in sorted(grid.x.items())}
    for (prec, ga, phase), by_point in sorted(grid.values.items()):
        for (h, t), v in sorted(by_point.items()):
            where = _cell_name(h, t, multi_t)
            if phase == "peak":
                name = f"peak_bytes.{prec}.ga{ga}.{where}"
            elif phase in ALLOCATOR:
                name = f"{phase}_peak_bytes.{prec}.ga{ga}.{where}"
            else:
                name = f"phase_peak_bytes.{prec}.ga{ga}.{where}.{phase}"
            metrics[name] = float(v)
    return metrics


COEFFICIENTS = (("a", "bytes_per_param"), ("b", "fixed_bytes"), ("c", "bytes_per_token"))


def _put(metrics, fits, name, fit, metric_name):
    """Record ``fit`` as ``fits[name]`` and each coefficient it has as ``metric_name(quantity)``."""
    if fit is None:
        return
    fits[name] = fit
    for key, quantity in COEFFICIENTS:
        if key in fit and (key != "b" or "a" in fit):  # without a size slope, b holds the params too
            metrics[metric_name(quantity)] = fit[key]


def _derived_name(prefix):
    return lambda quantity: f"{prefix}_{quantity}"


def _minus(plus, minus):
    """Per-cell difference (both maps complete, so over the same cells)."""
    return {p: plus[p] - minus[p] for p in plus if p in minus} if plus and minus else {}


def _mixed(precisions):
    return next((name for name in ("bf16", "fp16") if name in precisions), None)


def _group_fits(grid, metrics, fits):
    for prec, ga, phase in sorted(grid.values):
        values = grid.complete((prec, ga, phase))
        fit = grid.fit(values) if values else None
        if fit is None:
            continue
        name = f"peak.{prec}.ga{ga}" if phase == "peak" else f"phase.{prec}.ga{ga}.{phase}"
        _put(metrics, fits, name, fit, lambda q, at=f"{prec}.ga{ga}.{phase}": f"{q}.{at}")


def _derived(grid, precisions, gas, metrics, fits, view="peak"):
    """GA cost per precision, mixed-precision cost and GA excess of one view of the step peak
    (``peak``: live bytes; an ALLOCATOR view's names start with it: ``est_reserved_ga_cost_...``)."""
    peak = {(p, g): grid.complete((p, g, view)) for p in precisions for g in gas}
    lo, hi = min(gas), max(gas)
    mixed = _mixed(precisions)
    ga_cost = {}
    at = "" if view == "peak" else f"{view}_"
    for prec in precisions if hi != lo else ():
        name = f"{at}{'' if prec == mixed else f'{prec}_'}ga_cost"
        ga_cost[prec] = _minus(peak[prec, hi], peak[prec, lo])
        _put(metrics, fits, name, grid.fit(ga_cost[prec]), _derived_name(name))
    if mixed and "fp32" in precisions:
        mixed_cost = _minus(peak[mixed, lo], peak["fp32", lo])
        _put(metrics, fits, f"{at}mixed_cost", grid.fit(mixed_cost), _derived_name(f"{at}mixed_cost"))
        excess = _minus(ga_cost.get(mixed, {}), ga_cost.get("fp32", {}))
        _put(metrics, fits, f"{at}ga_excess", grid.fit(excess), _derived_name(f"{at}ga_excess"))


def derive(cells, precisions, gas):
    """(metrics, fits) for the result: per-cell and per-phase peaks, n_params, per-group and
    per-phase fits, the derived costs, and the fits' worst R²."""
    grid = Grid(cells)
    metrics, fits = _cell_metrics(grid), {}
    _group_fits(grid, metrics, fits)
    for view in ("peak", *ALLOCATOR):
        _derived(grid, precisions, gas, metrics, fits, view)
    r2 = [f["r2"] for k, f in fits.items() if k.startswith("peak.") and "r2" in f]
    if r2:
        metrics["fit_r2_min"] = min(r2)
    return {k: v for k, v in metrics.items() if math.isfinite(v)}, fits
