"""Which explainer reads a result: the name before the slash of its schema_version picks it; results
without one (custom probes, results stored before) are recognised by their metric names and details."""
from __future__ import annotations

from bisector.explain.ga_memory.explainer import GaMemoryExplainer
from bisector.explain.generic import Explainer
from bisector.explain.registry import explainer_for
from bisector.report.common import explanation, headline
from tests.unit.test_report import release_ga

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
    same = result.model_copy(update={"probe": result.probe.model_copy(update={"schema_version": "ga_memory/2"})})
    assert headline(same) == headline(result) and explanation(same) == explanation(result)
    other = result.model_copy(update={"probe": result.probe.model_copy(update={"schema_version": "other_probe/1"})})
    assert headline(other).startswith("First bad: accelerate 0.22.0 — ga_cost_bytes_per_param rose from 0.375")
    assert explanation(other)[0].startswith("Moved with it: ")


def test_each_explainer_keeps_its_own_facts_per_side():
    result = {"peak_phase": "step", "phases": {"forward": {"peak_bytes": 10}}, "cells": [{"hidden": 64, "ga": 1}]}
    assert GaMemoryExplainer().compact(result) == {"cells": [{"hidden": 64, "ga": 1}], "peak_phase": "step",
                                                   "phases": {"forward": 10}}
    assert Explainer().compact(result) == {"peak_phase": "step", "phases": {"forward": 10}}


def _sides(extra_bf16_ga1):
    """Two versions of a ga_memory result; the second adds ``extra_bf16_ga1(n)`` bytes to the bf16 GA=1 peak."""
    n = {64: 100_000, 128: 400_000, 256: 1_600_000}
    good, bad = {}, {}
    for h, params in n.items():
        good[f"n_params.h{h}"] = bad[f"n_params.h{h}"] = float(params)
        for (prec, ga), per in {("fp32", 1): 8, ("fp32", 2): 8, ("bf16", 1): 10, ("bf16", 2): 12}.items():
            value = per * params + 1000.0
            good[f"peak_bytes.{prec}.ga{ga}.h{h}"] = value
            bad[f"peak_bytes.{prec}.ga{ga}.h{h}"] = value + (extra_bf16_ga1(params) if (prec, ga) == ("bf16", 1) else 0)
    good["mixed_cost_bytes_per_param"], bad["mixed_cost_bytes_per_param"] = 2.0, 2.0
    return good, bad


def test_a_fixed_size_buffer_is_explained_in_bytes_not_per_parameter():
    """The llama causal-mask case: 32 MiB at every width is fixed bytes, never '+2.8 B/param'."""
    good, bad = _sides(lambda n: 32 * 2 ** 20)
    said = " ".join(GaMemoryExplainer().explain(good, bad, "peak_bytes.bf16.ga1.h64"))
    assert "rose by 32.00 MiB at every width (fixed bytes, not per parameter" in said and "B/param (" not in said
    good, bad = _sides(lambda n: 2.0 * n)   # a per-parameter cost stays per parameter
    said = " ".join(GaMemoryExplainer().explain(good, bad, "mixed_cost_bytes_per_param"))
    assert "rose by 2.000 B/param" in said and "at every width" not in said


def test_a_move_the_fits_call_fixed_is_in_bytes_in_every_precision():
    """transformers 4.36 -> 4.38 llama with 2048 positions: the causal-mask buffer is 79.35 MiB in fp32 at every
    width, and in bf16 the same buffer plus a little per parameter; both are fixed bytes, never '+2.8 B/param'."""
    mask = 79.35 * 2 ** 20
    good, bad = _sides(lambda n: 0)
    for h, n in ((64, 100_000), (128, 400_000), (256, 1_600_000)):
        bad[f"peak_bytes.fp32.ga1.h{h}"] += mask
        bad[f"peak_bytes.bf16.ga1.h{h}"] += mask + 2.819 * n
    said = " ".join(GaMemoryExplainer().explain(good, bad, "mixed_cost_bytes_per_param"))
    assert "the fp32 GA=1 peak rose by 79.35 MiB at every width (fixed bytes, not per parameter" in said
    assert ("the bf16 GA=1 peak rose by 79.35 MiB at every width (fixed bytes, not per parameter, +2.819 B/param "
            "beside it") in said
    assert "rose by 2.819 B/param (" not in said


def test_a_move_no_straight_line_holds_quotes_no_slope():
    good, bad = _sides(lambda n: 0)
    for h, extra in ((64, 10 * 2 ** 20), (128, 0.0), (256, 12 * 2 ** 20)):
        bad[f"peak_bytes.bf16.ga1.h{h}"] += extra
    said = " ".join(GaMemoryExplainer().explain(good, bad, "mixed_cost_bytes_per_param"))
    assert ("the bf16 GA=1 peak moved by 10.00 MiB at h64, 0 B at h128, 12.00 MiB at h256 (+1048% at h64): not a "
            "straight line over the parameters (fit R² ") in said and "so no per-parameter cost is quoted" in said


def test_sites_are_compared_at_the_same_phase_on_both_sides():
    """The peak moved from forward to backward: the sites are compared at the backward's peak on both sides."""
    cell = lambda phase, fwd, bwd: {"precision": "bf16", "ga": 1, "hidden": 64, "peak_bytes": 100, "peak_phase": phase,  # noqa: E731
                                    "phases": {"m0.forward": 100, "m0.backward": 90},
                                    "phase_sites": {"forward": fwd, "backward": bwd}, "sites": fwd}
    good_cell = cell("m0.forward", {"a": 5000.0}, {"g": 1000.0})
    bad_cell = cell("m0.backward", {"a": 5000.0}, {"g": 9000.0})
    good, bad = _sides(lambda n: 0.1 * n)
    said = GaMemoryExplainer().explain(good, bad, "peak_bytes.bf16.ga1.h64", {"cells": [good_cell]}, {"cells": [bad_cell]})
    line = next(s for s in said if "by allocation site" in s)
    assert line.startswith("At the backward's peak on both sides") and "g rose by 7.81 KiB" in line


def test_a_mask_at_a_7b_models_scale_moved_and_a_fake_mode_result_says_what_its_numbers_are():
    """transformers 4.37.2 -> 4.38.0 at llama-7b's shape, batch 8, fake mode: the fp32 step's 50.80 GiB peak rose
    by 96.25 MiB (0.19%: under the 1% that counts as 'no change' elsewhere, but an exact meter's 96 MiB)."""
    name = "peak_bytes.fp32.ga1.h4096"
    good = {name: 54_544_749_164.0, "n_params.h4096": 6_738_415_616.0}
    bad = {name: good[name] + 96.25 * 2 ** 20, "n_params.h4096": 6_738_415_616.0}
    fake = {"meter": "cpu-dispatch (fake)"}
    said = GaMemoryExplainer().explain(good, bad, name, fake, fake)
    assert said[0].startswith("The numbers are fake-mode live tensor bytes: the steps ran on fake tensors")
    assert "the fp32 GA=1 peak rose by 96.25 MiB (+0.19% at h4096)" in " ".join(said)
    real = GaMemoryExplainer().explain(good, bad, name, {"meter": "cpu-dispatch"}, {"meter": "cpu-dispatch"})
    assert not any("fake" in line for line in real)
    good[name] = bad[name] - 512 * 1024   # half a MiB on 50 GiB: no move
    assert "did not change" in " ".join(GaMemoryExplainer().explain(good, bad, name))
