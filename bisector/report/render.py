"""A bisect's report in each format, and the report files written next to the store.

JSON report schema ``bisector.report/1`` (``bisector report --format json`` and
``<store dir>/reports/<run>.json``): one object with

* ``schema``: "bisector.report/1";
* ``headline``: the one-line verdict (plain text);
* ``explanation``: list of plain-text sentences saying which measurements moved between the
  last good and the first bad (empty when not found or nothing to compare);
* every field of :class:`bisector.core.result.BisectResult`: ``run_id``, ``package``, ``mode``,
  ``status`` (found / no-regression / predates-range / undecided), ``reason``, ``criterion``,
  ``metric`` (when the criterion reads one),
  ``decision_rule``, ``first_bad`` / ``last_good`` (ref, kind, sha, date, subject, author, pr,
  link, pr_link, value, metrics, details), ``ambiguous``, ``probes_run``,
  ``measurements_reused``, ``steps`` (seq, phase, candidate, date, verdict, metric, value,
  metrics, repeats, seconds, reason, reused), ``notes``, ``compare_link``, ``refine_command``,
  ``widen_command``, ``command``, ``probe`` (with the ``schema_version`` of its results when
  they name one), ``environment``, ``log``.

Within ``/1`` fields are only ever added; renaming or removing one bumps the version.
Dates are ISO 8601, metric values raw floats in the probe's units (bytes, B/param, seconds).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from bisector.core.result import BisectResult
from bisector.errors import UsageError
from bisector.redact import write_redacted
from bisector.report.culprit_lines import full_headline
from bisector.report.common import explanation, story
from bisector.report.markdown import markdown
from bisector.report.text import render_text
from bisector.storage import RunKind, Store

REPORT_SCHEMA = "bisector.report/1"


def render_markdown(result: BisectResult) -> str:
    """The markdown report (for an issue comment)."""
    return markdown(result)


def render_json(result: BisectResult) -> str:
    """The versioned JSON report (``bisector.report/1``, see the module)."""
    told = story(result)
    data = {"schema": REPORT_SCHEMA, "headline": full_headline(result), **({"story": told} if told else {}),
            "explanation": explanation(result), **result.model_dump(mode="json")}
    return json.dumps(data, indent=2, ensure_ascii=False)


def render(result: BisectResult, fmt: str) -> str:
    """The report in ``fmt``: markdown, json or text."""
    return {"markdown": render_markdown, "json": render_json, "text": render_text}[fmt](result)


def load_result(store: Store, run_id: Optional[str]) -> BisectResult:
    """The result of a finished bisect run (the latest when ``run_id`` is None); UsageError otherwise."""
    run = store.get_run(run_id)
    if run is None or not run.result:
        where = f"no finished run {run_id!r}" if run_id else "no finished runs"
        raise UsageError(f"{where} in {store.path}")
    if run.kind is not RunKind.BISECT:
        raise UsageError(f"run {run.id} is a {run.kind} run: its report is the matrix.md written to its --out dir")
    return BisectResult.model_validate(run.result)


def write_reports(store: Store, result: BisectResult) -> Path:
    """Write markdown and JSON reports next to the store: <store dir>/reports/<run>.{md,json}."""
    out = store.path.parent / "reports"
    out.mkdir(parents=True, exist_ok=True)
    write_redacted(out / f"{result.run_id}.md", render_markdown(result))
    write_redacted(out / f"{result.run_id}.json", render_json(result))
    return out
