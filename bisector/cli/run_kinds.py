"""Which stored run ``bisector log`` and ``bisector report`` show, and how each kind of run is shown.

"latest" is the latest finished run (one with a result) of any kind, or of ``--kind``; an id (or a
unique prefix) names any run. Bisects and diffs keep their own renderers; a matrix run's report is
its ``matrix.md`` / ``matrix.json`` / terminal summary rebuilt from the stored result, a probe run's
is what ``bisector probe`` printed."""
from __future__ import annotations

import datetime as dt
import html
import json
from typing import Optional

from bisector.cli.cmd_diff import report_diff
from bisector.cli.cmd_probe import render_probe_run
from bisector.errors import UsageError
from bisector.matrix.grid_report import json_data, markdown, render_text as matrix_text
from bisector.matrix.grid_result import MatrixResult
from bisector.matrix.run_log import matrix_log
from bisector.job.commandline import joined
from bisector.report.common import md_escape
from bisector.report.render import load_result, render
from bisector.safety.safe_text import json_visible, visible
from bisector.report.text import render_log
from bisector.store.storage import RunKind, RunRow, Store


def _when(run: RunRow) -> dt.datetime:
    moment = dt.datetime.fromisoformat(run.updated.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)


def pick_run(store: Store, run_id: Optional[str], kind: Optional[str]) -> RunRow:
    """The run named by ``run_id`` (of ``kind`` when given), else the latest finished one; one line otherwise."""
    if run_id:
        run = store.get_run(run_id)
        if run is None:
            raise UsageError(f"no run {run_id!r} in {store.path}")
        if kind and run.kind != kind:
            raise UsageError(f"run {run.id} is a {run.kind} run, not a {kind} run")
        return run
    runs = [r for r in store.list_runs() if r.result and (kind is None or r.kind == kind)]
    if not runs:
        raise UsageError(f"no finished {kind + ' ' if kind else ''}runs in {store.path}")
    return max(enumerate(runs), key=lambda pair: (_when(pair[1]), pair[0]))[1]   # a tie: the one stored later


def _probe_log(store: Store, run: RunRow) -> str:
    res = run.result or {}
    m = store.get_measurement(res.get("measurement", ""))
    line = (f"{m.status.value} {res.get('package')}=={res.get('version')} ({m.seconds:.1f}s)"
            + (" (stored)" if res.get("reused") else "") + (f" # {m.reason}" if m.reason else "")) if m else \
        f"- {res.get('package')}=={res.get('version')} # its measurement is not in the store"
    return "\n".join([f"# bisector probe {run.id}: {res.get('package')} {res.get('version')}",
                      f"# command: {joined(run.command)}", f"# status: {run.status}", line])


def log_text(store: Store, run: RunRow) -> str:
    """The git-bisect-style log of any run (no control or bidi character of what it quotes raw)."""
    if run.kind is RunKind.MATRIX:
        return visible(matrix_log(store, run))
    if run.kind is RunKind.PROBE:
        return visible(_probe_log(store, run))
    return render_log(store, run)


def report_text(store: Store, run: RunRow, fmt: str, full: bool = False) -> str:
    """The report of a finished run in ``fmt`` (markdown, json, text; ``full``: a bisect's JSON with every
    step's samples and cells), with no control, bidi or invisible character of what it quotes raw."""
    text = _report_text(store, run, fmt, full)
    return json_visible(text) if fmt == "json" else visible(text)


def _report_text(store: Store, run: RunRow, fmt: str, full: bool = False) -> str:
    if not run.result:
        raise UsageError(f"run {run.id} ({run.kind}) has not finished: {run.status}; `bisector log {run.id}` "
                         "shows what it did")
    if run.kind is RunKind.MATRIX:
        result = MatrixResult.model_validate(run.result)
        if fmt == "json":
            return json.dumps(json_data(result, {}), indent=2)
        return markdown(result, {}) if fmt == "markdown" else matrix_text(result, {})
    if run.kind in (RunKind.PROBE, RunKind.DIFF):
        text = render_probe_run(store, run, fmt) if run.kind is RunKind.PROBE else report_diff(store, run.id, fmt)
        return _as_markdown(run, text) if fmt == "markdown" else text
    return render(load_result(store, run.id), fmt, full=full)


def _as_markdown(run: RunRow, text: str) -> str:
    """A report that has only a text form, for an issue comment: its first line as the title, the whole text
    verbatim below it."""
    first = text.splitlines()[0] if text else run.id
    return f"### {md_escape(first)}\n\n<pre>\n{html.escape(text)}\n</pre>\n\nbisector {run.kind} run `{run.id}`\n"
