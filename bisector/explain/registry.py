"""Which explainer reads a result: the one registered under its ``schema_version``'s name.

A probe's result says ``schema_version = "<name>/<version>"``; every version of ``<name>`` is read by
the explainer registered under ``<name>`` here (a new probe adds its module and one line), any other
name by the generic one. Results without a schema (custom probes, results stored before reports kept
it) are recognised by their metric names and details, which is how all results were read before.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from bisector.explain.command_run import CommandExplainer
from bisector.explain.ga_memory.explainer import GaMemoryExplainer
from bisector.explain.generic import Explainer

EXPLAINERS: dict[str, Explainer] = {"ga_memory": GaMemoryExplainer(), "command": CommandExplainer()}
GENERIC = Explainer()


def explainer_for(schema_version: Optional[str], metrics: Optional[Mapping[str, float]] = None,
                  details: Optional[Mapping[str, Any]] = None) -> Explainer:
    """The explainer of results with this schema (or, without one, these metrics and details)."""
    if schema_version:
        return EXPLAINERS.get(schema_version.split("/", 1)[0], GENERIC)
    return next((e for e in EXPLAINERS.values() if e.claims(metrics or {}, details or {})), GENERIC)


def compact_details(result: Optional[Mapping[str, Any]], metrics: Optional[Mapping[str, float]] = None) -> dict:
    """A probe result's facts an explanation needs, by its own explainer (see ``Explainer.compact``);
    ``metrics`` are the result's metrics when ``result`` does not hold them."""
    if not result:
        return {}
    found = explainer_for(result.get("schema_version"), metrics or result.get("metrics"), result)
    return found.compact(result)


def explain(good: Optional[dict], bad: Optional[dict], metric: Optional[str] = None,
            good_details: Optional[dict] = None, bad_details: Optional[dict] = None,
            schema_version: Optional[str] = None) -> list[str]:
    """Sentences saying which measurements moved between last good (``good``) and first bad (``bad``)."""
    found = explainer_for(schema_version, {**(good or {}), **(bad or {})}, good_details or bad_details)
    return found.explain(good, bad, metric, good_details, bad_details)


def metric_label(name: Optional[str], schema_version: Optional[str] = None) -> str:
    """A human name for a metric, by the explainer of its results."""
    return explainer_for(schema_version, {name: 0.0} if name else {}).label(name)
