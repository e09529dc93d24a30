"""What the peaks behind a derived metric did between two cells (the level before and after a step or
a regression), in the words of a bisect's verdict line: the explainer's ``behind`` (for ga_memory,
bisector.explain.ga_memory.moves.peaks_behind), as bisector.report.common.move_phrase uses it. Stored
on the step, the cell and the issue draft, so matrix.json, matrix.md and the drafts say the same."""
from __future__ import annotations

from typing import Mapping, Optional

from bisector.explain.registry import explainer_for


def peaks_said(good: Mapping[str, float], bad: Mapping[str, float], metric: Optional[str]) -> Optional[str]:
    """'the GA=1 peaks fell (bf16 -1.896 B/param, fp32 -0.652 B/param), the GA=2 peaks did not change; no
    peak rose', or None (a metric not derived from peaks, a side without it)."""
    if not metric or metric not in good or metric not in bad:
        return None
    good, bad = dict(good), dict(bad)
    return explainer_for(None, {**good, **bad}).behind(good, bad, metric)
