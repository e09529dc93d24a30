"""The typed facts a measurement carries (bisector/core/facts.py)."""
from __future__ import annotations

from bisector.core.facts import Device
from bisector.core.measurement import Measurement, Status, oom_cells


def test_a_results_declared_fields_are_typed_and_a_custom_probes_mistyped_ones_never_crash():
    """What host code reads of a probe result is typed (bisector.core.facts); a custom probe's field of
    one of those names but another type is left out of the typed view, and kept as written for its
    explainer."""
    def m(result):
        return Measurement(key="k", package="p", candidate="c", env_fingerprint="e", probe_fingerprint="f",
                           status=Status.OK, seconds=1.0, details={"result": result})

    ga = m({"cell_errors": 2, "oom_cells": ["fp32.ga1.h64"], "knobs": {"ga": 2}, "meter": "cpu-dispatch"})
    assert (ga.result.cell_errors, ga.result.knobs, ga.result.meter) == (2, {"ga": 2}, "cpu-dispatch")
    assert oom_cells(ga) == ["fp32.ga1.h64"]
    odd = m({"device": "cpu", "cells": 3, "cell_errors": "none", "mine": [1]})
    assert odd.result.device == Device() and odd.result.cells == [] and odd.result.cell_errors == 0
    assert odd.result.fields() == {"device": "cpu", "cells": 3, "cell_errors": "none", "mine": [1]}
    assert m({}).result is None and oom_cells(m({})) == []
