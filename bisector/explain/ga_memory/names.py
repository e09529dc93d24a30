"""The ga_memory probe's metric and phase names, as the reports read them.

Per-cell peaks are ``peak_bytes.<precision>.ga<k>.h<hidden>``; the costs fitted from them are GA cost
(GA=hi peak minus GA=lo peak), mixed-precision cost (mixed GA=lo peak minus fp32 GA=lo peak) and GA
excess (mixed GA cost minus fp32 GA cost); phases are ``m<i>.<kind>`` or ``<kind>``. Other views of the
step peak carry their name in front (``reserved_peak_bytes...``, ``est_reserved_ga_cost_...``) and in their
label: the CUDA meter's ``reserved`` / ``requested``, and the allocator model's estimates from the CPU trace
(``est_reserved`` / ``est_allocated``), never labelled as measured.
"""
from __future__ import annotations

import re
from typing import Optional

PEAK = re.compile(r"^peak_bytes\.(?P<prec>[A-Za-z0-9]+)\.ga(?P<ga>\d+)\.h(?P<h>\d+)$")
DERIVED = re.compile(r"^(?:(?P<prec>[a-z0-9]+)_)?(?P<kind>ga_cost|ga_excess|mixed_cost)_"
                      r"(?P<unit>bytes_per_param|fixed_bytes)$")
KIND_LABEL = {"ga_cost": "GA cost", "ga_excess": "GA excess", "mixed_cost": "mixed-precision cost"}
CELL_KEYS = ("hidden", "precision", "ga", "n_params", "peak_bytes", "peak_phase", "error", "grads_at_step_start",
              "reserved_peak_bytes", "requested_peak_bytes", "est_reserved_peak_bytes", "est_allocated_peak_bytes",
              "allocator_model")
MODEL = "allocator model, from the CPU trace"
VIEWS = {"reserved": "CUDA reserved", "requested": "CUDA requested",
         "est_reserved": f"estimated CUDA reserved ({MODEL})", "est_allocated": f"estimated CUDA allocated ({MODEL})"}
VIEW = r"(?P<view>est_reserved|est_allocated|reserved|requested)"
VIEW_PEAK = re.compile(rf"^{VIEW}_peak_bytes\.(?P<prec>[A-Za-z0-9]+)\.ga(?P<ga>\d+)\.h(?P<h>\d+)(?:\.t(?P<t>\d+))?$")
VIEW_DERIVED = re.compile(rf"^{VIEW}_(?P<base>(?:[a-z0-9]+_)?(?:ga_cost|ga_excess|mixed_cost)_\w+)$")
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
    derived = VIEW_DERIVED.match(name)
    if derived:
        return f"{metric_label(derived['base'])}, {VIEWS[derived['view']]}"
    cell = VIEW_PEAK.match(name)
    if cell:
        return f"{_cell_peak(cell)}, {VIEWS[cell['view']]}"
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
        phase = fitted["phase"]
        where = "step" if phase == "peak" or phase in VIEWS else PHASE_WORDS.get(phase, phase)
        label = f"{fitted['prec']} GA={fitted['ga']} {where} {what}"
        return f"{label}, {VIEWS[phase]}" if phase in VIEWS else label
    return name


def _cell_peak(cell) -> str:
    """'bf16 GA=2 peak at h256 (8 tokens)': the cell a per-cell peak belongs to."""
    tokens = f" ({cell['t']} tokens)" if cell["t"] else ""
    return f"{cell['prec']} GA={cell['ga']} peak at h{cell['h']}{tokens}"


def phase_kind(name: str) -> str:
    """'m1.forward' -> 'forward', 'step' -> 'step', 'm0.zero_grad#2' -> 'zero_grad'."""
    return name.split("#", 1)[0].rsplit(".", 1)[-1]
