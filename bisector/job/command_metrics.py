"""The metrics the command meter (probes/command) gives a user's program, read from the probe's own table.

The table lives once, in ``probes/command/_aggregate.py`` (``METRICS``: name -> (unit, meaning)); the
host reads it with ``ast`` (probes import torch, which bisector never imports) to check ``--metric``,
to print the names in ``--help`` and to know each metric's unit.
"""
from __future__ import annotations

import ast
import functools
import re

from bisector.data import probes_dir

DEFAULT_METRIC = "step_peak_bytes"
_RANKED = re.compile(r"^(?P<name>[a-z_]+)\.rank(?P<rank>\d{1,6})$")


@functools.cache
def metric_table() -> dict[str, tuple[str, str]]:
    """name -> (unit, meaning), as the command meter documents them."""
    tree = ast.parse((probes_dir() / "command" / "_aggregate.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "METRICS" for t in node.targets):
            return {k: tuple(v) for k, v in ast.literal_eval(node.value).items()}
    raise RuntimeError("probes/command/_aggregate.py has no METRICS table")


def metric_names() -> list[str]:
    """The metric names, in the table's order."""
    return list(metric_table())


def with_default_metric(data):
    """A raw job table (``[probe]``, ``[criterion]``) whose probe is a command: its criterion reads
    step_peak_bytes unless it names another metric (run, probe, diff and matrix alike)."""
    if isinstance(data, dict) and isinstance(data.get("probe"), dict) and data["probe"].get("command"):
        criterion = data.get("criterion") if isinstance(data.get("criterion"), dict) else {}
        if not criterion.get("metric"):
            data = {**data, "criterion": {**criterion, "metric": DEFAULT_METRIC}}
    return data


def unknown_metric(name: str) -> str | None:
    """Why ``name`` is not a command metric (None when it is one: a name of the table, or ``<name>.rank<N>``)."""
    match = _RANKED.match(name)
    if name in metric_table() or (match and match["name"] in metric_table()):
        return None
    return (f"unknown metric {name!r} for a command run (-- CMD); the command meter gives: "
            f"{', '.join(metric_names())} (and <metric>.rank<N> per rank)")
