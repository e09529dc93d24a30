"""The metrics the command meter (probes/command) gives a user's program, read from the meter's own table.

The table lives once, in ``probes/command/_aggregate.py`` (``METRICS``: name -> (unit, meaning)); the
host reads it with ``ast`` (probes import torch, which bisector never imports) to check ``--metric``,
to print the names in ``--help`` and to know each metric's unit.
"""
from __future__ import annotations

import ast
import functools
import re

from bisector.core.measurement import Measurement, Status
from bisector.data import probes_dir
from bisector.errors import cut

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


def unknown_metric(name: str) -> str | None:
    """Why ``name`` is not a command metric (None when it is one: a name of the table, or ``<name>.rank<N>``)."""
    match = _RANKED.match(name)
    if name in metric_table() or (match and match["name"] in metric_table()):
        return None
    return (f"unknown metric {cut(name)!r} for a command run (-- CMD); the command meter gives: "
            f"{', '.join(metric_names())} (and <metric>.rank<N> per rank)")


def computed_number(name: str | None) -> bool:
    """Whether ``name`` (or ``<name>.rank<N>``) is one of the numbers the program computes, as the meter reads them
    (a loss, a gradient norm: the table's metrics without a unit)."""
    if not name:
        return False
    match = _RANKED.match(name)
    found = metric_table().get(match["name"] if match else name)
    return found is not None and found[0] == ""


def steps_left_out(m: Measurement) -> str | None:
    """One line when a command's measurement shows that ``--measure-skip`` left out every optimizer step the
    command took (bad input, known only once the command has run); None otherwise (and for other probes)."""
    result = m.result
    if m.status is not Status.OK or result is None or result.schema_version != "command/1":
        return None
    skip, steps = result.fields().get("measure_skip"), m.metrics.get("optimizer_steps")
    if not isinstance(skip, int) or isinstance(skip, bool) or not steps or skip < steps:
        return None
    return (f"--measure-skip {skip} leaves none of the {steps:.0f} optimizer step{'s' if steps != 1 else ''} the "
            f"command took (at {m.candidate}) to measure: give --measure-skip below {steps:.0f}")


def fake_refused(m: Measurement) -> str | None:
    """One line when ``--fake`` could not run the command: it read a tensor's value (``loss.item()``, a
    data-dependent branch) that fake tensors do not have; the line says where (bad input: nothing to bisect)."""
    result = m.result
    refused = result.fields().get("fake_refused") if result is not None else None
    if not isinstance(refused, str) or not refused:
        return None
    return (f"--fake: {refused[:300]} (at {m.candidate}); the program reads a tensor's value, which fake tensors do "
            "not have: run it without --fake")
