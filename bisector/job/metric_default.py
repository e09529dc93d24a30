"""The metric a job's criterion reads when it names none: its probe's (each kind says which, bisector.job.probe).

Applied to the raw tables before they are validated (run, matrix, diff and probe alike), so a rule given without
a metric reads the probe's. Without a metric and without a rule, ``crash_is_bad`` asks where the program starts
to fail, and no metric is read (the criterion is "the program fails")."""
from __future__ import annotations

from pydantic import ValidationError

from bisector.job.probe import probe_from

RULE_KEYS = ("threshold", "max_increase", "max_change", "auto")


def with_default_metric(data):
    """A raw job (``[probe]``, ``[criterion]``) whose criterion names no metric: with its probe's default metric."""
    if not isinstance(data, dict) or "probe" not in data:
        return data
    criterion = data.get("criterion") if isinstance(data.get("criterion"), dict) else {}
    if criterion.get("metric"):
        return data
    rule = any(criterion.get(k) not in (None, False) for k in RULE_KEYS) or str(criterion.get("compare")) in ("stats",
                                                                                                           "exact")
    if criterion.get("crash_is_bad") and not rule:
        return data
    try:
        probe = probe_from(data["probe"])
    except (ValidationError, TypeError, ValueError):
        return data   # the probe's own validation says what is wrong with it
    metric = probe.default_metric if rule or probe.metric_without_rule else None
    return {**data, "criterion": {**criterion, "metric": metric}} if metric else data
