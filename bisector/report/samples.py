"""Stats mode in the reports: each boundary candidate's samples against the good endpoint's, with the
p-values and the shift (text lines and a markdown table with the raw samples folded)."""
from __future__ import annotations

import html

from bisector.core.result import BisectResult
from bisector.core.stats import SampleEvidence
from bisector.core.units import human_value
from bisector.report.common import md_escape, result_metric

_NAMES = {"last_good": "last good", "first_bad": "first bad"}


def _side(result: BisectResult, key: str) -> str:
    p = result.last_good if key == "last_good" else result.first_bad
    return p.ref[:10] if p is not None else "-"


def _summary(e: SampleEvidence, metric: str) -> str:
    g = e.vs_good
    test = f"p={g.p_value:.2g} (MWU {g.p_mwu:.2g}, KS {g.p_ks:.2g}) {g.comparison.value.upper()}"
    better = f"; against the bad endpoint p={e.vs_bad.p_value:.2g}" if e.vs_bad else ""
    return (f"{g.n_candidate} samples, median {human_value(g.candidate_median, metric)}, against {g.n_good} of the "
            f"good endpoint's (median {human_value(g.good_median, metric)}): shift {g.effect:+.1%}, {test}{better}")


def evidence_lines(result: BisectResult) -> list[str]:
    """'samples: first bad 1a2b3c4d5e: 25 samples, median ... shift +20.1%, p=1.2e-05 ...'."""
    metric = result_metric(result) or ""
    return [f"samples: {_NAMES[k]} {_side(result, k)}: {_summary(e, metric)}" for k, e in result.evidence.items()]


def _values(values: list[float], metric: str) -> str:
    return ", ".join(human_value(v, metric) for v in values)


def evidence_markdown(result: BisectResult) -> list[str]:
    """A table of the boundary's samples and tests, then every sample in a folded block."""
    if not result.evidence:
        return []
    metric = result_metric(result) or ""
    rows = ["**Samples** (stats mode: each side against the good endpoint's samples):", "",
            "| | candidate | samples | median | good samples | good median | shift | p (MWU) | p (KS) | verdict |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    raw = []
    for key, e in result.evidence.items():
        g = e.vs_good
        rows.append(f"| {_NAMES[key]} | `{md_escape(_side(result, key))}` | {g.n_candidate} | "
                    f"{human_value(g.candidate_median, metric)} | {g.n_good} | {human_value(g.good_median, metric)} | "
                    f"{g.effect:+.1%} | {g.p_mwu:.2g} | {g.p_ks:.2g} | {g.comparison.value.upper()} |")
        raw += [f"{_NAMES[key]} {_side(result, key)}: {_values(e.samples, metric)}",
                f"  good endpoint's samples it was compared with: {_values(e.reference, metric)}"]
    body = "\n".join(html.escape(line, quote=False) for line in raw)
    return rows + ["", "<details><summary>Every sample</summary>", "", f"<pre>\n{body}\n</pre>", "", "</details>", ""]
