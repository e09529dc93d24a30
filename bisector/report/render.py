"""A bisect's report in each format, and the report files written next to the store.

JSON report schema ``bisector.report/2`` (``bisector report --format json`` and
``<store dir>/reports/<run>.json``): one object with

* ``schema``: "bisector.report/2"; ``bisector``: the version that made the run (``made_by``) and
  the one rendering it (``rendered_by``); ``probe_name`` / ``probe_version``;
* ``headline``: the one-line verdict (plain text); ``story`` and ``explanation``: plain-text sentences
  (the upstream report and contrast setting beside ours; what moved between last good and first bad);
* every field of :class:`bisector.core.result.BisectResult`: ``run_id``, ``package``, ``mode``,
  ``status`` (found / no-regression / predates-range / undecided), ``reason``, ``criterion``,
  ``metric`` and ``threshold`` (when the criterion reads one), ``decision_rule``, ``first_bad`` /
  ``last_good`` / ``good_end`` / ``bad_end`` (ref, kind, sha, date, subject, author, pr, link, pr_link,
  value, metrics, env, pins), ``ambiguous``, ``probes_run``, ``measurements_reused``, ``steps`` (seq,
  phase, candidate, date, verdict, metric, value, repeats, seconds, reason, reused), ``notes``,
  ``compare_link``, ``repo_url``, ``refine_command``, ``widen_command``, ``command``, ``probe`` (with
  the ``schema_version`` of its results), ``environment``, ``also_changed``, ``attribution``,
  ``confirmation``, ``followed``, ``evidence``, ``repro`` (``bisector report --repro``), ``log``.

By default a point's ``metrics`` are its probe's headline metrics (all of them, up to 32, for a probe no
explainer knows) and its ``details`` (per-cell peaks
and allocation sites) and each step's ``metrics`` are left out, so a 16-step run stays well under
50 KB; ``--full`` keeps every one (``full: true``). Within ``/2`` fields are only ever added; renaming
or removing one bumps the version (``/1`` had every point's details and every step's metrics).
Dates are ISO 8601, metric values raw floats in the probe's units (bytes, B/param, seconds).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from pydantic import ValidationError

from bisector.core.result import BisectResult, made_by
from bisector.errors import UsageError
from bisector.redact import write_redacted
from bisector.report.culprit_lines import full_headline
from bisector.report.common import explainer, explanation, result_metric, story
from bisector.report.env_labels import POINTS, flat_environments
from bisector.report.markdown import markdown
from bisector.safety.safe_text import json_visible
from bisector.report.text import render_text
from bisector.store.storage import RunKind, Store

REPORT_SCHEMA = "bisector.report/2"
KEPT_METRICS = 32   # more metrics than this (from a probe no explainer knows): only the criterion's is kept


def render_markdown(result: BisectResult) -> str:
    """The markdown report of a (stored) bisect, for an issue body or comment: the public entry point."""
    return markdown(result)


def _compact(data: dict, result: BisectResult) -> dict:
    """``data`` (a result's JSON) without per-cell details, per-step metrics and a point's metrics
    other than its probe's headline ones (see the module)."""
    metric = result_metric(result)
    for step in data.get("steps") or []:
        step.pop("metrics", None)
    points = [data.get(k) for k in POINTS] + list((data.get("contrast") or {}).get("points") or [])
    for point in (p for p in points if p):
        point.pop("details", None)
        metrics = point.get("metrics") or {}
        named = explainer(result).headline(metrics, metric)   # a probe it knows names more than its criterion's
        keep = named if len(named) > 1 or len(metrics) > KEPT_METRICS else metrics
        point["metrics"] = {k: v for k, v in metrics.items() if k in keep}
    if data.get("followed") and result.followed is not None:
        data["followed"] = _compact(data["followed"], result.followed)
    return data


def render_json(result: BisectResult, full: bool = False) -> str:
    """The versioned JSON report (``bisector.report/2``, see the module); ``full``: every detail."""
    told = story(result)
    body = flat_environments(result.model_dump(mode="json"), result)
    probe = result.probe
    data = {"schema": REPORT_SCHEMA, "bisector": {"made_by": result.bisector_version, "rendered_by": made_by()},
            "probe_name": probe.name or probe.probe, "probe_version": probe.version,
            "full": full, "headline": full_headline(result), **({"story": told} if told else {}),
            "explanation": explanation(result), **(body if full else _compact(body, result))}
    return json_visible(json.dumps(data, indent=2, ensure_ascii=False))   # bidi and C1 as \\u escapes


def render(result: BisectResult, fmt: str, full: bool = False) -> str:
    """The report in ``fmt``: markdown, json (``full``: every detail) or text."""
    if fmt == "json":
        return render_json(result, full)
    return {"markdown": render_markdown, "text": render_text}[fmt](result)


def load_result(store: Store, run_id: Optional[str]) -> BisectResult:
    """The result of a finished bisect run (the latest when ``run_id`` is None); UsageError otherwise."""
    run = store.get_run(run_id)
    if run is None or not run.result:
        where = f"no finished run {run_id!r}" if run_id else "no finished runs"
        raise UsageError(f"{where} in {store.path}")
    if run.kind is not RunKind.BISECT:
        raise UsageError(f"run {run.id} is a {run.kind} run: its report is the matrix.md written to its --out dir")
    try:
        return BisectResult.model_validate(run.result)
    except ValidationError as exc:   # a stored result no reader can read: one line, not an internal error
        raise UsageError(f"run {run.id} in {store.path}: its stored result is damaged ({exc.error_count()} "
                         f"problem(s), first at {'.'.join(map(str, exc.errors()[0]['loc']))}); "
                         f"`bisector store check --store {store.path}` lists what else is") from None


def write_reports(store: Store, result: BisectResult) -> Path:
    """Write markdown and JSON reports next to the store: <store dir>/reports/<run>.{md,json}."""
    out = store.path.parent / "reports"
    out.mkdir(parents=True, exist_ok=True)
    write_redacted(out / f"{result.run_id}.md", render_markdown(result))
    write_redacted(out / f"{result.run_id}.json", render_json(result))
    return out
