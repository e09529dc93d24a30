"""The explainer of the command meter's results (``command/1``: a user's program, measured per optimizer step).

It names the metrics as the meter documents them, leads a single measurement with the criterion's metric
and the other whole-command values (ranks after), keeps each side's per-step peaks (``Point.details``),
and explains a move with the per-step values at last good and first bad and what else moved, without
the per-rank copies when the max over ranks already says it.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from bisector.core.units import human_value
from bisector.explain import numbers_story
from bisector.explain.command_fake import compact_fake, fake_lines, fake_pair
from bisector.explain.command_sites import compact_sites, one_version_sites, site_moves
from bisector.explain.generic import Explainer
from bisector.job.probe.program_metrics import metric_table

STEPS_KEPT = 12


def _base(name: str) -> str:
    return name.split(".rank", 1)[0]


class CommandExplainer(Explainer):
    """Reads ``command/1`` results."""

    def meaning(self, name: str) -> str:
        found = metric_table().get(_base(name))
        rank = name.split(".rank", 1)[1] if ".rank" in name else None
        return ((f"rank {rank}: " if rank else "") + found[1]) if found else ""

    def headline(self, metrics: Mapping[str, float], metric: Optional[str]) -> list[str]:
        first = [metric] if metric and metric in metrics else []
        whole = [k for k in metric_table() if k in metrics and k not in first]
        ranks = sorted(k for k in metrics if ".rank" in k and _base(k) == (metric or ""))
        return first + whole + ranks

    def compact(self, result: Optional[Mapping[str, Any]]) -> dict:
        if not result:
            return {}
        steps = result.get("steps") if isinstance(result.get("steps"), list) else []
        peaks = [s.get("cuda_peak_allocated", s.get("peak_bytes")) for s in steps if isinstance(s, dict)]
        out: dict[str, Any] = {"step_peaks": [p for p in peaks if isinstance(p, (int, float))][:STEPS_KEPT]}
        out.update(numbers_story.compact(steps))   # the loss and the norms of the first steps
        for key in ("scope", "measure_skip"):
            if isinstance(result.get(key), (str, int)):
                out[key] = result[key]
        absent = result.get("absent")
        if isinstance(absent, dict):
            out["absent"] = {str(k): str(v)[:200] for k, v in list(absent.items())[:12]}
        out.update(compact_sites(result))
        out.update(compact_fake(result))
        return out

    def one_version(self, metrics: Mapping[str, float], details: Mapping[str, Any], metric: Optional[str]) -> list[str]:
        lines = numbers_story.one_version(details)
        steps = _steps_line(details)
        if steps:
            lines.append(steps)
        if details.get("scope"):
            lines.append(f"Measured over: {details['scope']}.")
        return lines + one_version_sites(details) + fake_lines(details)

    def explain(self, good: Optional[dict], bad: Optional[dict], metric: Optional[str] = None,
                good_details: Optional[dict] = None, bad_details: Optional[dict] = None) -> list[str]:
        out = numbers_story.story(metric, good_details or {}, bad_details or {})
        for side, details in (("last good", good_details or {}), ("first bad", bad_details or {})):
            steps = _steps_line(details)
            if steps:
                out.append(f"{side}: {steps[0].lower()}{steps[1:]}")
        if good and bad:
            ranked = {k for k in {**good, **bad} if ".rank" in k and _base(k) in good}
            out += self.moved_with_it({k: v for k, v in good.items() if k not in ranked},
                                      {k: v for k, v in bad.items() if k not in ranked}, metric)
        return out + site_moves(good_details or {}, bad_details or {}) + fake_pair(good_details or {},
                                                                                  bad_details or {})


def _steps_line(details: Mapping[str, Any]) -> Optional[str]:
    peaks = details.get("step_peaks") or []
    if not peaks:
        return None
    skip = details.get("measure_skip", 1)
    shown = ", ".join(human_value(p, "peak_bytes") for p in peaks)
    return f"Peak per optimizer step: {shown} (the first {skip} left out as warm-up)."
