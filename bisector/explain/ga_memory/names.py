"""The ga_memory probe's metric and phase names, as the reports read them.

Per-cell peaks are ``peak_bytes.<precision>.ga<k>.h<hidden>``; the costs fitted from them are GA cost
(GA=hi peak minus GA=lo peak), mixed-precision cost (mixed GA=lo peak minus fp32 GA=lo peak) and GA
excess (mixed GA cost minus fp32 GA cost); phases are ``m<i>.<kind>`` or ``<kind>``.
"""
from __future__ import annotations

import re
from typing import Optional

PEAK = re.compile(r"^peak_bytes\.(?P<prec>[A-Za-z0-9]+)\.ga(?P<ga>\d+)\.h(?P<h>\d+)$")
DERIVED = re.compile(r"^(?:(?P<prec>[a-z0-9]+)_)?(?P<kind>ga_cost|ga_excess|mixed_cost)_"
                      r"(?P<unit>bytes_per_param|fixed_bytes)$")
KIND_LABEL = {"ga_cost": "GA cost", "ga_excess": "GA excess", "mixed_cost": "mixed-precision cost"}
CELL_KEYS = ("hidden", "precision", "ga", "n_params", "peak_bytes", "peak_phase", "error", "grads_at_step_start",
              "reserved_peak_bytes", "requested_peak_bytes")
RESULT_KEYS = ("knobs", "meter")
OWN_NAMES = re.compile(r"^(n_params\.h\d+|fit_r2_min)$")

PHASE_PEAK = re.compile(r"^phase_peak_bytes\.(?P<prec>[A-Za-z0-9]+)\.ga(?P<ga>\d+)\.h(?P<h>\d+)(?:\.t(?P<t>\d+))?"
                        r"\.(?P<phase>[a-z_]+)$")
PHASE_FIT = re.compile(r"^(?P<q>bytes_per_param|bytes_per_token|fixed_bytes)\.(?P<prec>[A-Za-z0-9]+)\.ga(?P<ga>\d+)"
                       r"\.(?P<phase>[a-z_]+)$")
PHASE_WORDS = {"step": "optimizer-step", "zero_grad": "zero_grad"}
Group = tuple[str, int]   # (precision, gradient accumulation steps)


def metric_label(name: Optional[str]) -> str:
    """A human name for a metric: 'GA cost', 'bf16 GA=2 peak at h256'; other names unchanged."""
    if not name:
        return "verdict"
    peak = PEAK.match(name)
    if peak:
        return f"{peak['prec']} GA={peak['ga']} peak at h{peak['h']}"
    derived = DERIVED.match(name)
    if derived:
        label = KIND_LABEL[derived["kind"]]
        label = f"{derived['prec']} {label}" if derived["prec"] else label
        return label if derived["unit"] == "bytes_per_param" else f"{label} (fixed part)"
    if name == "fit_r2_min":
        return "worst fit R²"
    phase = PHASE_PEAK.match(name)
    if phase:
        tokens = f" ({phase['t']} tokens)" if phase["t"] else ""
        return f"{phase['prec']} GA={phase['ga']} {PHASE_WORDS.get(phase['phase'], phase['phase'])} peak at h{phase['h']}{tokens}"
    fitted = PHASE_FIT.match(name)
    if fitted:
        what = {"bytes_per_param": "bytes per parameter", "bytes_per_token": "bytes per token",
                "fixed_bytes": "fixed bytes"}[fitted["q"]]
        where = "step" if fitted["phase"] == "peak" else PHASE_WORDS.get(fitted["phase"], fitted["phase"])
        return f"{fitted['prec']} GA={fitted['ga']} {where} {what}"
    return name


def phase_kind(name: str) -> str:
    """'m1.forward' -> 'forward', 'step' -> 'step', 'm0.zero_grad#2' -> 'zero_grad'."""
    return name.split("#", 1)[0].rsplit(".", 1)[-1]
