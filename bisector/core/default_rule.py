"""The rule a criterion gets when it names a metric and no rule: every command answers.

A memory metric (bytes, MiB, bytes per parameter...) is BAD when it rises more than ``MEMORY_INCREASE`` above
the good end's value; a time metric is judged by its samples (``--compare stats``, the noisy-metric rule); any
other metric has no rule that could be taken for granted, and a job that names one without a rule is refused
in one line before anything is measured; for a number the program computes (a loss, a gradient norm) that line
offers the two-sided rules (``--max-change``, ``--compare exact``). The chosen rule is said in one line (:func:`chosen_rule`).
"""
from __future__ import annotations

from typing import Optional

from bisector.core.criterion import Compare, Criterion
from bisector.core.units import metric_unit
from bisector.errors import UsageError

MEMORY_INCREASE = "10%"
MEMORY_UNITS = {"bytes", "KiB", "MiB", "GiB", "kB", "MB", "GB", "B/param", "B/token"}
TIME_UNITS = {"s", "ms", "us", "ns"}
NUMBER_RULE = ("--max-change X or X% (BAD when it moves more than that from the good end's, either way) or --compare "
               "exact (when it changes at all)")
RULE_FLAGS = ("--threshold X, --max-increase X or X%, --auto, --max-change X or X% (either way), --compare exact or "
              "--compare stats")


def has_rule(c: Criterion) -> bool:
    """Whether the criterion says when a value is BAD (a threshold rule, or stats mode)."""
    return (c.threshold is not None or c.max_increase is not None or c.auto or c.two_sided
            or c.compare is Compare.STATS)


def with_default_rule(c: Criterion, computed: bool = False) -> Criterion:
    """``c`` as given when it has a rule or no metric; else with the default rule for its metric's unit
    (:func:`chosen_rule` says which); UsageError when the unit has none. ``computed``: the metric is a number the
    program computes (a loss, a gradient norm): no direction is worse, so the refusal offers the two-sided rules."""
    if has_rule(c) or not c.metric:
        return c
    unit = metric_unit(c.metric)
    if unit in MEMORY_UNITS:
        chosen = Criterion.model_validate({**c.model_dump(exclude_unset=True), "max_increase": MEMORY_INCREASE})
        why = (f"no rule given: {c.metric} (memory) is BAD when it rises more than {MEMORY_INCREASE} above the good "
               f"end's (--max-increase {MEMORY_INCREASE})")
    elif unit in TIME_UNITS:
        chosen = Criterion.model_validate({**c.model_dump(exclude_unset=True), "compare": Compare.STATS.value})
        why = (f"no rule given: {c.metric} (time) is judged by its samples against the good end's (--compare stats, "
               f"BAD from {chosen.min_effect} slower)")
    elif computed:
        raise UsageError(f"no rule for {c.metric}: a number the program computes has no default rule (neither way "
                         f"is worse by itself): give {NUMBER_RULE}")
    else:
        raise UsageError(f"no rule for {c.metric}: give {RULE_FLAGS} (only memory and time metrics have a default "
                         "rule)")
    chosen._chosen = f"{why}; --threshold, --max-increase, --max-change or --compare choose another"
    return chosen


def chosen_rule(c: Criterion) -> Optional[str]:
    """The one line saying which rule was chosen for the job, when it gave none (None when it gave one)."""
    return c._chosen
