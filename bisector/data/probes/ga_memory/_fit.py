"""Straight-line fits over model sizes and the probe's derived metrics.

Every quantity is fitted as ``bytes = a * n_params + b`` by least squares over the widths that
measured successfully: ``a`` is the per-parameter cost, ``b`` the fixed cost. Differences
(GA cost, mixed-precision cost, excess) are fitted on the per-size differences, which equals
the difference of the fitted lines over the same sizes.
"""
from __future__ import annotations

import math


def fit_line(xs, ys) -> dict:
    """Least squares ``y = a x + b``; r2 = 1 - SS_res/SS_tot (1.0 when y is exactly fitted)."""
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        raise ValueError("need at least two distinct x values")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    b = my - a * mx
    residuals = [y - (a * x + b) for x, y in zip(xs, ys)]
    ss_res = sum(r * r for r in residuals)
    ss_tot = sum((y - my) ** 2 for y in ys)
    if ss_tot == 0:
        r2 = 1.0 if ss_res <= 1e-9 * max(1.0, my * my) else 0.0
    else:
        r2 = 1.0 - ss_res / ss_tot
    return {"a": a, "b": b, "r2": r2, "n": n, "max_abs_residual": max(abs(r) for r in residuals)}


def _peaks(cells):
    """{(precision, ga): {hidden: peak_bytes}} and {hidden: n_params} from successful cells."""
    peaks, n_params = {}, {}
    for c in cells:
        if c.get("error") or "peak_bytes" not in c:
            continue
        peaks.setdefault((c["precision"], c["ga"]), {})[c["hidden"]] = c["peak_bytes"]
        n_params[c["hidden"]] = c["n_params"]
    return peaks, n_params


def _fit_map(n_params, values):
    """Fit ``values[h]`` against n_params; None with fewer than two sizes."""
    sizes = sorted(values)
    if len(sizes) < 2:
        return None
    return fit_line([n_params[h] for h in sizes], [values[h] for h in sizes])


def _minus(plus, minus):
    """Per-size difference over the sizes both maps have."""
    return {h: plus[h] - minus[h] for h in set(plus) & set(minus)}


def _mixed(precisions):
    for name in ("bf16", "fp16"):
        if name in precisions:
            return name
    return None


def _cell_metrics(peaks, n_params):
    metrics = {f"n_params.h{h}": float(n) for h, n in sorted(n_params.items())}
    for (prec, ga), by_size in sorted(peaks.items()):
        for h, v in sorted(by_size.items()):
            metrics[f"peak_bytes.{prec}.ga{ga}.h{h}"] = float(v)
    return metrics


def _put(metrics, fits, name, fit, per_param, fixed):
    if fit is None:
        return
    fits[name] = fit
    metrics[per_param] = fit["a"]
    metrics[fixed] = fit["b"]


def derive(cells, precisions, gas):
    """(metrics, fits) for the result: per-cell peaks, n_params, fitted costs, fit quality.

    Fits and costs use only (precision, GA) groups measured at every planned width: a cost
    fitted over the widths that happened to survive (an OOM, an unproved precision) would be a
    different number under the same name, so it is left out instead.
    """
    measured, n_params = _peaks(cells)
    metrics, fits = _cell_metrics(measured, n_params), {}
    planned = {c["hidden"] for c in cells}
    peaks = {g: by_size for g, by_size in measured.items() if set(by_size) == planned}
    for (prec, ga), by_size in sorted(peaks.items()):
        fit = _fit_map(n_params, by_size)
        if fit is not None:
            fits[f"peak.{prec}.ga{ga}"] = fit
    lo, hi = min(gas), max(gas)
    mixed = _mixed(precisions)
    ga_cost = {}
    for prec in precisions if hi != lo else ():
        prefix = "" if prec == mixed else f"{prec}_"
        ga_cost[prec] = _minus(peaks.get((prec, hi), {}), peaks.get((prec, lo), {}))
        _put(metrics, fits, f"{prefix}ga_cost", _fit_map(n_params, ga_cost[prec]),
             f"{prefix}ga_cost_bytes_per_param", f"{prefix}ga_cost_fixed_bytes")
    if mixed and "fp32" in precisions:
        mixed_cost = _minus(peaks.get((mixed, lo), {}), peaks.get(("fp32", lo), {}))
        _put(metrics, fits, "mixed_cost", _fit_map(n_params, mixed_cost),
             "mixed_cost_bytes_per_param", "mixed_cost_fixed_bytes")
        excess = _minus(ga_cost.get(mixed, {}), ga_cost.get("fp32", {}))
        _put(metrics, fits, "ga_excess", _fit_map(n_params, excess),
             "ga_excess_bytes_per_param", "ga_excess_fixed_bytes")
    r2 = [f["r2"] for k, f in fits.items() if k.startswith("peak.")]
    if r2:
        metrics["fit_r2_min"] = min(r2)
    return {k: v for k, v in metrics.items() if math.isfinite(v)}, fits
