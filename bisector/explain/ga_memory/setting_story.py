"""What the ga_memory probe's results say at one version, and why another loop sees otherwise.

* where the GA bytes live: the GA=hi and GA=lo cells of one precision at the largest width, compared
  at the same phase kind (forward with forward) by allocation site;
* the mixed-precision cost and where it lives (the seed's second complaint, on its own);
* the contrast's why: which loop knobs differ, and the fact the bytes follow, whether gradients
  exist when a step starts (``grads_at_step_start``, measured in every cell).
"""
from __future__ import annotations

from typing import Optional

from bisector.core.result import BisectResult
from bisector.core.units import human_bytes, human_value
from bisector.explain.ga_memory.names import MODEL, metric_label, phase_kind
from bisector.explain.generic import joined, unchanged
from bisector.explain.sites import site_changes
from bisector.explain.reference_story import contrast_hides_it

Key = tuple[str, int, int]   # (precision, ga, hidden)
METERS = {"cpu-dispatch": "cpu-dispatch (live tensor bytes; no allocator reserve, unlike NVML)",
          "cpu-dispatch (fake)": "cpu-dispatch (fake) (fake-mode live tensor bytes: the step ran on fake tensors, "
                                 "nothing allocated; no allocator reserve, unlike NVML)",
          "cuda": "cuda (allocated bytes; reserved and NVML beside them)"}
GRADS = {"none": "None (freed by zero_grad)", "kept": "kept (allocated, as zeros)", "mixed": "partly allocated"}


FAKE_NOTE = ("The numbers are fake-mode live tensor bytes: the steps ran on fake tensors (torch's FakeTensorMode, "
             "the model built under it), nothing was allocated, and the meter counted every storage as a real run "
             "counts it, to the byte; no allocator reserve, unlike NVML.")


def fake_note(*details: Optional[dict]) -> list[str]:
    """The sentence a fake-mode result must carry (``--fake``: meter ``cpu-dispatch (fake)``), else nothing."""
    return [FAKE_NOTE] if any("(fake)" in str((d or {}).get("meter") or "") for d in details) else []


def cells_by_key(details: dict) -> dict[Key, dict]:
    """The compact cells that measured, by (precision, ga, hidden)."""
    return {(c["precision"], c["ga"], c["hidden"]): c for c in details.get("cells") or []
            if "peak_bytes" in c and not c.get("error")}


def mixed_precision(cells: dict[Key, dict]) -> Optional[str]:
    precisions = {k[0] for k in cells}
    return next((p for p in ("bf16", "fp16") if p in precisions), None)


def _pair_at(cells, prec_a, ga_a, prec_b, ga_b):
    """The two cells at the largest width both have, or None."""
    widths = sorted({k[2] for k in cells if (prec_a, ga_a, k[2]) in cells and (prec_b, ga_b, k[2]) in cells})
    if not widths:
        return None
    h = widths[-1]
    return h, cells[prec_a, ga_a, h], cells[prec_b, ga_b, h]


def coarse(sites: dict[str, float]) -> dict[str, float]:
    """Sites with the autograd node folded into '(backward)': one parameter's gradient is made by
    AddmmBackward0 in fp32 and ToCopyBackward0 under autocast, the same bytes either way."""
    out: dict[str, float] = {}
    for site, value in sites.items():
        head, sep, where = site.partition(" | ")
        words = head.split()
        if len(words) > 1:
            head = f"{words[0]} (backward)"
        key = f"{head}{sep}{where}"
        out[key] = out.get(key, 0.0) + value
    return out


def _at_phase(a: dict, b: dict, kind: str, earlier_grads: bool = False) -> str:
    """'at the forward's peak: X rose by 3.3 MiB (...)', comparing a and b at the same phase kind."""
    a_sites, b_sites = (a.get("phase_sites") or {}).get(kind, {}), (b.get("phase_sites") or {}).get(kind, {})
    moved, kept = site_changes(coarse(a_sites), coarse(b_sites))
    if not moved:
        return ""
    more = f"; unchanged: {', '.join(kept)}" if kept else ""
    if earlier_grads and kind == "forward" and "(backward)" in moved[0]:
        moved[0] += " (made by a backward pass: the gradients of an earlier micro-step, alive during this forward)"
    return f" At the {kind}'s peak, by allocation site: " + "; ".join(moved) + more + "."


def _peaks(a: dict, b: dict, a_name: str, b_name: str) -> str:
    diff = b["peak_bytes"] - a["peak_bytes"]
    sign = "+" if diff >= 0 else "-"
    return (f"{b_name} peaks in {b['peak_phase']} at {human_bytes(b['peak_bytes'])}, {a_name} in {a['peak_phase']} "
            f"at {human_bytes(a['peak_bytes'])} ({sign}{human_bytes(abs(diff))})")


def where_ga_bytes_live(details: dict, metrics: dict[str, float]) -> list[str]:
    """Where GA=hi holds more than GA=lo at one version (mixed precision, else fp32)."""
    cells = cells_by_key(details)
    prec = mixed_precision(cells) or "fp32"
    gas = sorted({k[1] for k in cells if k[0] == prec})
    found = _pair_at(cells, prec, gas[0], prec, gas[-1]) if len(gas) > 1 else None
    if not found:
        return []
    h, lo, hi = found
    name = "ga_cost_bytes_per_param" if prec != "fp32" else "fp32_ga_cost_bytes_per_param"
    cost = f" ({metric_label(name)} {human_value(metrics[name], name)})" if name in metrics else ""
    grads = GRADS.get(lo.get("grads_at_step_start"), "")
    when = f" Gradients when a step starts: {grads}." if grads else ""
    return [f"Where the GA bytes live{cost}, {prec} at h{h}: {_peaks(lo, hi, f'GA={gas[0]}', f'GA={gas[-1]}')}."
            + _at_phase(lo, hi, phase_kind(hi["peak_phase"]), earlier_grads=True) + when]


def mixed_cost_lives(details: dict, metrics: dict[str, float]) -> list[str]:
    """Where the mixed-precision cost lives at GA=lo (or why there is none at the step's peak)."""
    cells = cells_by_key(details)
    prec = mixed_precision(cells)
    gas = sorted({k[1] for k in cells})
    found = _pair_at(cells, "fp32", gas[0], prec, gas[0]) if prec and gas else None
    name = "mixed_cost_bytes_per_param"
    if not found or name not in metrics:
        return []
    h, fp32, mixed = found
    head = f"{metric_label(name).capitalize()} (GA={gas[0]}) {human_value(metrics[name], name)}, at h{h}: "
    if unchanged(name, 0.0, metrics[name]):
        fwd = [(c.get("phases") or {}) for c in (fp32, mixed)]
        forward = [max((v for k, v in p.items() if phase_kind(k) == "forward"), default=None) for p in fwd]
        seen = (f"; the {prec} copies exist only in the forward ({human_bytes(forward[0])} → "
                f"{human_bytes(forward[1])}), below the step's peak in {mixed['peak_phase']}"
                if None not in forward else "")
        return [head + f"both precisions peak at {human_bytes(mixed['peak_bytes'])}{seen}."]
    return [head + _peaks(fp32, mixed, "fp32", prec) + "." + _at_phase(fp32, mixed, phase_kind(mixed["peak_phase"]))]


def _knob_differences(ours: dict, theirs: dict) -> list[str]:
    names = [k for k in ours if k not in ("loop", "implied_by_loop") and ours.get(k) != theirs.get(k)]
    return [f"{k} {ours[k]} vs {theirs.get(k)}" for k in names]


def _grads(details: dict) -> Optional[str]:
    states = {c.get("grads_at_step_start") for c in cells_by_key(details).values() if c.get("ga") == 1}
    return states.pop() if len(states) == 1 else None


def shown_point(result: BisectResult):
    """The version the story shows in detail: the first bad (it shows the effect), else the last good."""
    return next((p for p in (result.first_bad, result.last_good) if p is not None and p.details), None)


def contrast_why(result: BisectResult) -> list[str]:
    """Why the contrast setting measures otherwise: the knobs that differ and the gradients' state."""
    c = result.contrast
    ours_point = shown_point(result)
    if ours_point is None or not c or not c.points:
        return []
    theirs_point = next((p for p in c.points if p.ref == ours_point.ref), c.points[-1])
    ours, theirs = ours_point.details, theirs_point.details
    out = []
    differ = _knob_differences(ours.get("knobs") or {}, theirs.get("knobs") or {})
    if differ:
        out.append(f"The two loops differ in {joined(differ)} (the job's setting first).")
    g_ours, g_theirs = _grads(ours), _grads(theirs)
    if g_ours and g_theirs and g_ours != g_theirs:
        out.append(f"What the bytes follow is the gradients when a step starts: {GRADS[g_ours]} in the job's "
                   f"setting, {GRADS[g_theirs]} in {c.label}.")
        mixed = theirs_point.metrics.get("mixed_cost_bytes_per_param")
        if g_theirs == "kept" and mixed is not None:
            out.append("With them kept, GA=1 already holds the fp32 gradients during the forward, so GA=2 adds "
                       "nothing and the same bytes count as mixed-precision cost "
                       f"({human_value(mixed, 'mixed_cost_bytes_per_param')}) instead.")
    if contrast_hides_it(result):
        out.append(f"That is why a script in {c.label} could not reproduce what the report saw.")
    return out


COSTS = ("ga_excess_bytes_per_param", "ga_cost_bytes_per_param", "fp32_ga_cost_bytes_per_param",
         "mixed_cost_bytes_per_param")


def reserved_estimate(details: dict, metrics: dict[str, float]) -> list[str]:
    """The allocator model's view (CPU meter): the costs in estimated CUDA reserved bytes, and the
    largest GA=hi cell's reserved peak beside its live-bytes peak."""
    values = [f"{metric_label(n)} {human_value(metrics['est_reserved_' + n], n)}" for n in COSTS
              if "est_reserved_" + n in metrics]
    if not values:
        return []
    cells = {k: c for k, c in cells_by_key(details).items() if "est_reserved_peak_bytes" in c}
    prec = mixed_precision(cells) or "fp32"
    key = max((k for k in cells if k[0] == prec), key=lambda k: (k[1], k[2]), default=None)
    at = ""
    if key:
        c = cells[key]
        frag = (c.get("allocator_model") or {}).get("at_peak", {}).get("fragmentation")
        unused = f", {frag:.0%} of it unallocated at that peak" if isinstance(frag, float) else ""
        at = (f"; {prec} GA={key[1]} at h{key[2]} would reserve {human_bytes(c['est_reserved_peak_bytes'])} for "
              f"{human_bytes(c['peak_bytes'])} of live tensors{unused}")
    return [f"Estimated CUDA reserved ({MODEL}; not measured, and not validated on a GPU yet): "
            + ", ".join(values) + at + "."]


def one_version(metrics: dict[str, float], details: dict, metric: Optional[str]) -> list[str]:
    """The single-version view: the headline metric, the costs, where the GA and mixed bytes live, and
    the allocator model's estimate of the same costs in reserved bytes."""
    names = [metric] if metric else []
    names += [n for n in COSTS if n not in names]
    values = [f"{metric_label(n)} {human_value(metrics[n], n)}" for n in names if n in metrics]
    out = [", ".join(values) + "."] if values else []
    return (fake_note(details) + out + where_ga_bytes_live(details, metrics) + mixed_cost_lives(details, metrics)
            + reserved_estimate(details, metrics))


def setting(result: BisectResult) -> str:
    """The job's probe setting in words: loop, precisions, GA, model, tokens, meter."""
    cfg = result.probe.config or {}
    if not cfg:
        return result.probe.probe or "the job's probe"
    sizes = cfg.get("sizes") or []
    width = f"widths {sizes[0]}..{sizes[-1]}" if len(sizes) > 1 else f"width {sizes[0]}" if sizes else ""
    meter = result.environment.meter or ""
    meter = METERS.get(meter, meter)
    tokens = ",".join(str(t) for t in cfg.get("seq_lens") or [cfg.get("seq_len")] if t)
    return (f"{cfg.get('loop')} loop, {' vs '.join(cfg.get('precisions') or [])}, GA "
            f"{' vs '.join(str(g) for g in cfg.get('ga') or [])}, {cfg.get('layers')}-layer {cfg.get('arch')} at "
            f"{width}, {tokens} tokens, {cfg.get('optimizer')}" + (f", meter {meter}" if meter else ""))


def story(result: BisectResult) -> list[str]:
    """Where the bytes live at the version shown in detail (the first bad, else the last good)."""
    point = shown_point(result)
    if point is None:
        return []
    lines = where_ga_bytes_live(point.details, point.metrics) + mixed_cost_lives(point.details, point.metrics)
    return [f"At {result.package} {point.ref}: " + lines[0][0].lower() + lines[0][1:], *lines[1:]] if lines else []
