"""A diff's report: the terminal text and the versioned JSON.

JSON schema ``bisector.diff/1``: ``schema``, ``headline`` (one line), and every field of
:class:`bisector.difference.diff_model.DiffResult`: ``run_id``, ``status`` (found / no-difference / undecided),
``reason``, ``package``, ``version``, ``metric``, ``criterion``, ``threshold``, ``a`` / ``b`` (``packages``,
``args``), ``a_value`` / ``b_value``, ``start`` (the side the trials start from), ``changes`` and ``minimal``
(each ``kind``: package / arg / knob, ``name``, ``a``, ``b``, ``flag``), ``trials`` (``seq``, ``label``,
``applied``, ``verdict``, ``value``, ``side``, ``reason``, ``measurements``, ``reused``), ``proof``,
``bound``, ``steps``, ``notes``, ``probes_run``, ``measurements_reused``, ``command``, ``follow_command``,
``followed`` (a bisect report of schema bisector.report/1, without its headline), ``probe``.
"""
from __future__ import annotations

import json

from bisector.core.changes import Change, ChangeKind, Trial
from bisector.core.units import human_value
from bisector.difference.diff_model import DiffResult, DiffStatus
from bisector.job.commandline import joined
from bisector.report.common import headline
from bisector.report.env_labels import flat_environments
from bisector.safety.safe_text import json_visible, one_line

DIFF_SCHEMA = "bisector.diff/1"
_KIND = {ChangeKind.PACKAGE: "package", ChangeKind.ARG: "probe argument", ChangeKind.KNOB: "probe knob",
         ChangeKind.CANDIDATE: "candidate"}


def diff_headline(r: DiffResult) -> str:
    """The one-line answer."""
    where = f"{r.package} {r.version}"
    if r.status is DiffStatus.FOUND:
        names = " and ".join(_side_by_side(c) for c in r.minimal)
        other = "B" if r.start == "A" else "A"
        return f"The difference that matters at {where}: {names} (it moves {r.start} to {other}'s side)"
    if r.status is DiffStatus.NO_DIFFERENCE:
        return f"No difference to explain at {where}: {r.reason}"
    return f"Undecided at {where}: {r.reason}"


def _side_by_side(c: Change) -> str:
    def show(v):
        return "(none)" if v is None else "(set)" if v == "" else v
    return f"{c.name} (A: {show(c.a)}, B: {show(c.b)})"


def _trial(t: Trial, metric) -> str:
    value = f"{human_value(t.value, metric)}, " if t.value is not None else ""
    side = f"{t.side}'s side" if t.side else f"SKIP ({t.reason})"
    return f"{t.label}: {value}{side}"


def render_diff_text(r: DiffResult) -> str:
    """The terminal report: headline, the two ends, the minimal difference with its proof, the rest."""
    lines = [diff_headline(r), f"criterion: {r.criterion}"]
    if r.a_value is not None or r.b_value is not None:
        lines.append("A: " + (human_value(r.a_value, r.metric) if r.a_value is not None else "-") +
                     "   B: " + (human_value(r.b_value, r.metric) if r.b_value is not None else "-"))
    for c in r.minimal:
        how = f", set with {c.flag}=<value>" if c.kind is ChangeKind.KNOB and c.flag else ""
        lines.append(f"minimal: {_side_by_side(c)} [{_KIND[c.kind]}{how}]")
    proof = [t for t in r.trials if t.seq in r.proof] if r.proof else r.trials
    lines += ["proof:" if r.proof else "trials:"] + [f"  {_trial(t, r.metric)}" for t in proof]
    if r.changes:
        lines.append(f"changes between A and B ({len(r.changes)}): " + "; ".join(c.describe() for c in r.changes))
    bound = f" (bound {r.bound})" if r.bound else ""
    lines.append(f"trials: {len(r.trials)}{bound}; probes run: {r.probes_run}, measurements reused from the store: "
                 f"{r.measurements_reused}")
    if r.follow_command and r.followed is None:
        lines.append(f"bisect it with: {joined(r.follow_command)}")
    if r.followed is not None:
        lines.append(f"followed {r.followed.package}: {headline(r.followed)}")
    lines += [f"note: {n}" for n in r.notes]
    lines.append(f"run: {r.run_id}  (bisector log {r.run_id})")
    return "\n".join(one_line(line) for line in lines)   # names, values, reasons, notes: foreign text


def render_diff_json(r: DiffResult) -> str:
    """The versioned JSON report (``bisector.diff/1``, see the module)."""
    data = {"schema": DIFF_SCHEMA, "headline": diff_headline(r), **r.model_dump(mode="json")}
    if r.followed is not None and data.get("followed"):
        flat_environments(data["followed"], r.followed)
    return json_visible(json.dumps(data, indent=2, ensure_ascii=False))
