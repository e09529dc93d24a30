"""Which explainer reads a result: the name before the slash of its schema_version picks it; results
without one (custom probes, results stored before) are recognised by their metric names and details."""
from __future__ import annotations

from bisector.explain.ga_memory import GaMemoryExplainer
from bisector.explain.generic import Explainer
from bisector.explain.registry import explainer_for
from bisector.report.common import explanation, headline
from tests.test_report import release_ga

PEAK = "peak_bytes.fp32.ga1.h64"


def test_the_schema_name_picks_the_explainer_for_every_version():
    assert isinstance(explainer_for("ga_memory/1"), GaMemoryExplainer)
    assert isinstance(explainer_for("ga_memory/2"), GaMemoryExplainer)
    assert type(explainer_for("import_cost/1")) is Explainer
    known = explainer_for("import_cost/1", {PEAK: 1.0}, {"cells": [{"ga": 1}]})   # the schema wins over names
    assert type(known) is Explainer and known.label(PEAK) == PEAK


def test_results_without_a_schema_are_recognised_by_names_and_details():
    assert isinstance(explainer_for(None, {"ga_cost_bytes_per_param": 1.0}), GaMemoryExplainer)
    assert isinstance(explainer_for(None, {"fit_r2_min": 1.0}), GaMemoryExplainer)
    assert isinstance(explainer_for(None, {}, {"cells": [{"hidden": 64}]}), GaMemoryExplainer)
    assert type(explainer_for(None, {"step_s": 1.0}, {"peak_phase": "backward"})) is Explainer


def test_the_recorded_schema_decides_how_a_report_reads():
    result = release_ga()   # stored without a schema: read as ga_memory by its metric names
    assert headline(result).startswith("First bad: accelerate 0.22.0 — GA cost rose from 0.375 B/param")
    same = result.model_copy(update={"probe": {**result.probe, "schema_version": "ga_memory/2"}})
    assert headline(same) == headline(result) and explanation(same) == explanation(result)
    other = result.model_copy(update={"probe": {**result.probe, "schema_version": "other_probe/1"}})
    assert headline(other).startswith("First bad: accelerate 0.22.0 — ga_cost_bytes_per_param rose from 0.375")
    assert explanation(other)[0].startswith("Moved with it: ")


def test_each_explainer_keeps_its_own_facts_per_side():
    result = {"peak_phase": "step", "phases": {"forward": {"peak_bytes": 10}}, "cells": [{"hidden": 64, "ga": 1}]}
    assert GaMemoryExplainer().compact(result) == {"cells": [{"hidden": 64, "ga": 1}], "peak_phase": "step",
                                                   "phases": {"forward": 10}}
    assert Explainer().compact(result) == {"peak_phase": "step", "phases": {"forward": 10}}
