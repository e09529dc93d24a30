"""The generic explainer, and the base class of the explainers that know one probe.

Input: both sides' ``metrics`` (``Point.metrics``) and, optionally, their compact probe details
(``Point.details``). Output: a few plain-text sentences (the reports escape them). For any probe the
other metrics are ranked by relative change, the report says which moved and which did not, and
where the probe names the phase holding its peak, whether that moved.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from bisector.core.result import BisectResult
from bisector.core.units import human_value
from bisector.explain.reference_story import contrast_line, ours_line, reference_line

TOL = 0.01             # relative change at or below which a measurement "did not change"
PER_PARAM_FLOOR = 0.01  # B/param: smaller moves of a per-parameter cost count as unchanged
BYTES_FLOOR = 1024      # bytes: smaller moves of a byte count (a fitted fixed part, a peak) count as unchanged


def rel(a: float, b: float) -> float:
    """The relative change from ``a`` to ``b`` (0 when both are about 0)."""
    scale = max(abs(a), abs(b))
    return abs(b - a) / scale if scale > 1e-12 else 0.0


def unchanged(name: str, a: float, b: float) -> bool:
    """Whether metric ``name`` did not move, by its unit's floor or the relative tolerance."""
    if "bytes_per_param" in name:
        if abs(b - a) <= PER_PARAM_FLOOR:
            return True
    elif ("bytes" in name or name.startswith("peak")) and abs(b - a) <= BYTES_FLOOR:
        return True
    return rel(a, b) <= TOL


def pair(name: str, a: float, b: float) -> str:
    """'0.370 → 1.940 B/param' (the unit once when both sides share it)."""
    left, right = human_value(a, name), human_value(b, name)
    unit = right.rsplit(" ", 1)[-1] if " " in right else None
    if unit and left.endswith(" " + unit):
        left = left[: -len(unit) - 1]
    return f"{left} → {right}"


def joined(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def phase_peaks(phases: Any) -> dict[str, float]:
    """{phase: peak bytes} from {phase: {peak_bytes: ...}} or {phase: number}."""
    if not isinstance(phases, dict):
        return {}
    out = {}
    for name, rec in phases.items():
        value = rec.get("peak_bytes") if isinstance(rec, dict) else rec
        if isinstance(value, (int, float)):
            out[str(name)] = value
    return out


class Explainer:
    """What bisector knows of a probe's output, for the reports. This base class is the generic
    explainer; one that knows a probe subclasses it and is registered in bisector.explain.registry
    under the name its results give before the slash of their ``schema_version``."""

    def label(self, name: Optional[str]) -> str:
        """A human name for a metric ('verdict' when there is none)."""
        return name or "verdict"

    def setting(self, result: BisectResult) -> str:
        """The job's probe setting in words (for the report's first lines)."""
        probe = result.probe
        args = f" {probe.args}" if probe.args else ""
        return f"probe {probe.probe or '?'}{args}"

    def story(self, result: BisectResult) -> list[str]:
        """The report's first lines: what the upstream report measured, what we measured at the
        range's ends, and how the contrast setting sees them."""
        return (reference_line(result, self.label) + ours_line(result, self.label, self.setting(result))
                + contrast_line(result, self.label))

    def headline(self, metrics: Mapping[str, float], metric: Optional[str]) -> list[str]:
        """The metrics a single measurement leads with: the criterion's first."""
        return [metric] if metric and metric in metrics else []

    def meaning(self, name: str) -> str:
        """What a metric means, in a few words ('' when this explainer does not know)."""
        return ""

    def one_version(self, metrics: Mapping[str, float], details: Mapping[str, Any], metric: Optional[str]) -> list[str]:
        """What one measurement says, headline metric first (``bisector probe --explain``)."""
        if metric and metric in metrics:
            return [f"{self.label(metric)}: {human_value(metrics[metric], metric)}."]
        return []

    def claims(self, metrics: Mapping[str, float], details: Mapping[str, Any]) -> bool:
        """For results without a ``schema_version``: whether their metric names or details are this
        probe's (the generic explainer claims nothing; it is what is left)."""
        return False

    def compact(self, result: Optional[Mapping[str, Any]]) -> dict:
        """The probe result's facts an explanation needs, kept small (stored as ``Point.details``)."""
        if not result:
            return {}
        out: dict[str, Any] = {}
        if isinstance(result.get("peak_phase"), str):
            out["peak_phase"] = result["peak_phase"]
        phases = phase_peaks(result.get("phases"))
        if phases:
            out["phases"] = phases
        return out

    def behind(self, good: Optional[dict], bad: Optional[dict], metric: Optional[str]) -> Optional[str]:
        """For the verdict line: what the measurements a derived ``metric`` is computed from did between
        last good and first bad, so that a cost that rose while every peak fell says so where it is read
        first (None when the metric is not derived, as for every metric the generic explainer knows)."""
        return None

    def explain(self, good: Optional[dict], bad: Optional[dict], metric: Optional[str] = None,
                good_details: Optional[dict] = None, bad_details: Optional[dict] = None) -> list[str]:
        """Sentences saying which measurements moved between last good (``good``) and first bad (``bad``)."""
        if not good or not bad:
            return []
        return self.moved_with_it(good, bad, metric) + self.peak_phase(good_details or {}, bad_details or {})

    def moved_with_it(self, good: dict, bad: dict, metric: Optional[str], shown: int = 3) -> list[str]:
        """'Moved with it: b 1 → 4, +300%; ...' and 'c and d did not change.'"""
        names = [k for k in good if k in bad and k != metric]
        moved = sorted((k for k in names if not unchanged(k, good[k], bad[k])),
                       key=lambda k: (-rel(good[k], bad[k]), k))
        still = sorted(k for k in names if unchanged(k, good[k], bad[k]))
        out = []
        if moved:
            more = f" (and {len(moved) - shown} more)" if len(moved) > shown else ""
            out.append("Moved with it: " + "; ".join(self._move(k, good[k], bad[k]) for k in moved[:shown])
                       + more + ".")
        if still:
            more = [f"{len(still) - shown - 1} more"] if len(still) > shown + 1 else []
            shown_still = still if len(still) <= shown + 1 else still[:shown]
            out.append(f"{joined([self.label(k) for k in shown_still] + more)} did not change.")
        return out

    def _move(self, name: str, a: float, b: float) -> str:
        pct = f", {(b - a) / abs(a):+.0%}" if abs(a) > 1e-12 else ""
        return f"{self.label(name)} {pair(name, a, b)}{pct}"

    @staticmethod
    def peak_phase(good_details: Mapping[str, Any], bad_details: Mapping[str, Any]) -> list[str]:
        """Whether the phase holding the peak moved (when the probe names it)."""
        a, b = good_details.get("peak_phase"), bad_details.get("peak_phase")
        if not a or not b:
            return []
        if a == b:
            return [f"The peak sits in phase {a} on both sides."]
        return [f"The peak moved from phase {a} (last good) to phase {b} (first bad)."]
