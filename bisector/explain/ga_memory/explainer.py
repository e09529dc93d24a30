"""The explainer of the ``ga_memory`` probe (schema ``ga_memory/*``): its metric names, per-cell
peaks, per-phase allocation sites, the story of one version and why another loop sees otherwise.
The parts live in ga_memory_names (names), ga_memory_moves (between two versions) and
ga_memory_story (one version, and a contrast)."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from bisector.explain.ga_memory import setting_story
from bisector.explain.ga_memory.group_moves import peaks
from bisector.explain.ga_memory.moves import caveats, explain_moves, peaks_behind
from bisector.explain.ga_memory.names import CELL_KEYS, DERIVED, OWN_NAMES, PEAK, RESULT_KEYS, metric_label, phase_kind
from bisector.explain.generic import Explainer, phase_peaks
from bisector.explain.sites import by_site
from bisector.explain.reference_story import contrast_followup, contrast_line, ours_line, reference_line


def _phase_sites(cell: dict) -> dict[str, dict[str, float]]:
    """{phase kind: sites at the peak of that kind's largest micro-step phase} (forward with forward)."""
    if "phase_sites" in cell:
        return cell["phase_sites"]
    peaks, rows = phase_peaks(cell.get("phases")), cell.get("phase_attribution") or {}
    best: dict[str, str] = {}
    for name, value in peaks.items():
        kind = phase_kind(name)
        if name in rows and (kind not in best or value > peaks[best[kind]]):
            best[kind] = name
    return {kind: by_site(rows[name]) for kind, name in best.items()}


def _compact_cell(cell: dict) -> dict:
    out = {k: cell[k] for k in CELL_KEYS if cell.get(k) is not None}
    phases = phase_peaks(cell.get("phases"))
    if phases:
        out["phases"] = phases
    sites = by_site(cell.get("attribution")) if "sites" not in cell else cell["sites"]
    if sites:
        out["sites"] = sites
    per_phase = _phase_sites(cell)
    if per_phase:
        out["phase_sites"] = per_phase
    return out


HEADLINE = ("ga_excess_bytes_per_param", "ga_cost_bytes_per_param", "fp32_ga_cost_bytes_per_param",
            "mixed_cost_bytes_per_param", "ga_excess_fixed_bytes", "fit_r2_min",
            "est_reserved_ga_excess_bytes_per_param", "est_reserved_ga_cost_bytes_per_param",
            "est_reserved_fp32_ga_cost_bytes_per_param")
ESTIMATED = "modelled from the CPU trace, not measured; the model is not validated on a GPU yet"
MEANINGS = {
    "ga_excess_bytes_per_param": "what GA=2 costs beyond GA=1 in mixed precision, minus the same in fp32 (the seed's complaint)",
    "ga_cost_bytes_per_param": "GA=2 peak minus GA=1 peak, mixed precision, fitted per parameter",
    "fp32_ga_cost_bytes_per_param": "the same in fp32",
    "mixed_cost_bytes_per_param": "mixed-precision peak minus fp32 peak at GA=1 (the seed's second complaint)",
    "ga_excess_fixed_bytes": "the part of the GA excess that does not grow with the model",
    "fit_r2_min": "the worst straight-line fit over the model sizes (1 = exact)",
    "est_reserved_ga_excess_bytes_per_param": f"the GA excess in what the CUDA caching allocator would reserve ({ESTIMATED})",
    "est_reserved_ga_cost_bytes_per_param": f"the GA cost in what the CUDA caching allocator would reserve ({ESTIMATED})",
    "est_reserved_fp32_ga_cost_bytes_per_param": "the same in fp32",
}


class GaMemoryExplainer(Explainer):
    """Explains results of the ``ga_memory`` probe (schema ``ga_memory/*``)."""

    def label(self, name: Optional[str]) -> str:
        return metric_label(name)

    def setting(self, result) -> str:
        return setting_story.setting(result)

    def story(self, result) -> list[str]:
        """The seed's story: the report's numbers, ours, where the bytes live, the contrast and why."""
        return (reference_line(result, self.label) + ours_line(result, self.label, self.setting(result))
                + setting_story.story(result) + contrast_line(result, self.label)
                + setting_story.contrast_why(result) + contrast_followup(result))

    def headline(self, metrics, metric) -> list[str]:
        first = [metric] if metric in metrics else []
        return first + [n for n in HEADLINE if n in metrics and n not in first]

    def meaning(self, name: str) -> str:
        return MEANINGS.get(name, "")

    def one_version(self, metrics, details, metric) -> list[str]:
        return setting_story.one_version(dict(metrics), dict(details), metric)

    def claims(self, metrics: Mapping[str, float], details: Mapping[str, Any]) -> bool:
        return bool(details.get("cells")) or any(
            PEAK.match(n) or DERIVED.match(n) or OWN_NAMES.match(n) for n in metrics)

    def compact(self, result: Optional[Mapping[str, Any]]) -> dict:
        """Per-cell peaks, peak phases and allocation sites, then the generic facts."""
        if not result:
            return {}
        cells = [_compact_cell(c) for c in result.get("cells") or [] if isinstance(c, dict)]
        facts = {k: result[k] for k in RESULT_KEYS if result.get(k)}
        return {**({"cells": cells} if cells else {}), **facts, **super().compact(result)}

    def behind(self, good, bad, metric) -> Optional[str]:
        return peaks_behind(good or {}, bad or {}, metric)

    def explain(self, good: Optional[dict], bad: Optional[dict], metric: Optional[str] = None,
                good_details: Optional[dict] = None, bad_details: Optional[dict] = None) -> list[str]:
        good, bad = good or {}, bad or {}
        groups = set(peaks(good)) & set(peaks(bad))
        fake = setting_story.fake_note(good_details, bad_details)
        if not good or not bad or not groups:
            return fake + super().explain(good, bad, metric, good_details, bad_details)
        moves = explain_moves(good, bad, metric, good_details or {}, bad_details or {}, groups)
        return fake + moves + caveats(good, bad)
