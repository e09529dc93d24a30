"""The allocation trace the CPU meter records, its replay in the probe, the est_* metrics and fits, the
probe's allocator flags, and how the reports name the estimates (never as measured)."""
from __future__ import annotations

import json
import math
import os
import sys

import pytest

torch = pytest.importorskip("torch")

PROBES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "probes")
sys.path[:0] = [os.path.join(PROBES, "ga_memory"), PROBES]

from _allocator_model.conf import AllocSettings, parse_alloc_conf, settings_from_spec  # noqa: E402
from _allocator_model.replay import AllocatorEstimate, replay  # noqa: E402
from _allocator_model.trace import Trace, TraceRecorder  # noqa: E402
from _cli import config_hash, make_spec, parser  # noqa: E402
from _fit import derive  # noqa: E402
from _meters.cpu import StorageMeter  # noqa: E402

from bisector.explain.ga_memory.explainer import GaMemoryExplainer  # noqa: E402
from bisector.explain.ga_memory.names import metric_label  # noqa: E402

MIB = 1024 * 1024
ESTIMATE = "estimated CUDA reserved (allocator model, from the CPU trace)"


# --- the trace --------------------------------------------------------------------------------
def test_the_meter_records_allocations_frees_resizes_and_the_window():
    """Ops under the meter become the trace, in order: 1200 B for a, 1200 B for b, a freed; the
    window opens at reset_peak with its phases; an in-place resize takes a new block, then frees the old."""
    meter = StorageMeter(allocations=AllocatorEstimate(AllocSettings(), keep_trace=True))
    with meter:
        a = torch.ones(300)
        meter.reset_peak()
        meter.mark("m0.forward")
        b = a + 1
        del a
        meter.mark("m0.backward")
        b.resize_(1000)
        meter.mark(None)
        c = b * 2  # after the window: not recorded
    report = meter.report()
    meter.close()
    trace = report["alloc_trace"]
    assert trace["events"] == [1200, 1200, -1, 4000, -2]
    assert trace["window"] == [1, 5] and trace["phases"] == [[1, "m0.forward"], [3, "m0.backward"]]
    # the meter counts the resize as growth (peak 4000 B); the allocator holds old and new for the copy
    assert (report["peak_bytes"], report["allocator_model"]["requested_peak_bytes"]) == (4000, 4000 + 1200)
    assert report["est_allocated_peak_bytes"] == 4096 + 1536
    assert report["est_reserved_peak_bytes"] == 2 * MIB  # one small-pool segment
    assert report["allocator_model"]["settings"] == "torch defaults"
    del b, c


def _linear_step(meter, layers=3, width=512, batch=64):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    x = torch.randn(batch, width)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    meter.track(model.parameters())
    meter.track([x])
    with meter:
        for step in range(2):
            if step == 1:
                meter.reset_peak()
            meter.mark("m0.forward")
            loss = model(x).square().mean()
            meter.mark("m0.backward")
            loss.backward()
            meter.mark("m0.step")
            opt.step()
            opt.zero_grad(set_to_none=True)
            del loss
        meter.mark(None)
    report = meter.report()
    meter.close()
    return report


def test_estimates_bound_the_live_peak_and_replay_the_same_from_json():
    """requested == the live-bytes peak exactly; est allocated >= it; est reserved >= est allocated;
    the kept trace, read back from JSON, replays to the same numbers (as the host or a GPU run would)."""
    report = _linear_step(StorageMeter(allocations=AllocatorEstimate(AllocSettings(), keep_trace=True)))
    model = report["allocator_model"]
    assert model["requested_peak_bytes"] == report["peak_bytes"]
    assert report["est_reserved_peak_bytes"] >= report["est_allocated_peak_bytes"] >= report["peak_bytes"]
    assert report["est_allocated_peak_bytes"] % 512 == 0 and model["peak_phase"].startswith("m0.")
    again = replay(Trace.from_json(json.loads(json.dumps(report["alloc_trace"]))), AllocSettings())
    assert again["est_reserved_peak_bytes"] == report["est_reserved_peak_bytes"]
    assert again["at_peak"] == model["at_peak"]


def test_without_allocator_settings_the_meter_records_nothing():
    report = _linear_step(StorageMeter())
    assert not any(k.startswith("est_") or k in ("allocator_model", "alloc_trace") for k in report)


def test_a_trace_past_its_limit_is_no_estimate():
    recorder = TraceRecorder(limit=3)
    for key in range(5):
        recorder.alloc(key, 100)
    assert recorder.truncated and len(recorder) == 3
    assert "truncated" in replay(recorder.trace())["error"]


def test_settings_change_the_estimate_of_the_same_trace():
    """The same allocations (a 30 MiB block, then 3 MiB ones) under different settings."""
    trace = Trace([3 * MIB, 30 * MIB, 3 * MIB], window=(0, 3))
    defaults = replay(trace)["est_reserved_peak_bytes"]
    expandable = replay(trace, parse_alloc_conf("expandable_segments:True"))["est_reserved_peak_bytes"]
    assert (defaults, expandable) == (50 * MIB, 40 * MIB)


# --- metrics and fits ---------------------------------------------------------------------------
def _cells():
    """est_reserved = slope * n + 2 MiB per (precision, GA), beside live peaks."""
    sizes = {64: 1000, 128: 3000, 192: 6000}
    slope = {("fp32", 1): 8, ("fp32", 2): 9, ("bf16", 1): 10, ("bf16", 2): 14}
    return [{"hidden": h, "precision": p, "ga": g, "n_params": n, "peak_bytes": 4 * n,
             "peak_phase": "m0.forward", "est_allocated_peak_bytes": 5 * n,
             "est_reserved_peak_bytes": slope[p, g] * n + 2 * MIB}
            for h, n in sizes.items() for (p, g) in slope]


def test_estimated_reserved_peaks_are_fitted_like_the_live_ones():
    metrics, fits = derive(_cells(), ["fp32", "bf16"], [1, 2])
    close = lambda k, v: math.isclose(metrics[k], v, rel_tol=1e-9, abs_tol=1e-6)  # noqa: E731
    assert metrics["est_reserved_peak_bytes.bf16.ga2.h128"] == 14 * 3000 + 2 * MIB
    assert close("bytes_per_param.bf16.ga2.est_reserved", 14) and close("fixed_bytes.bf16.ga2.est_reserved", 2 * MIB)
    assert close("est_reserved_ga_cost_bytes_per_param", 4) and close("est_reserved_ga_cost_fixed_bytes", 0)
    assert close("est_reserved_fp32_ga_cost_bytes_per_param", 1)
    assert close("est_reserved_mixed_cost_bytes_per_param", 2) and close("est_reserved_ga_excess_bytes_per_param", 3)
    assert close("est_allocated_ga_cost_bytes_per_param", 0) and close("ga_cost_bytes_per_param", 0)
    assert "est_reserved_ga_cost" in fits and "fit_r2_min" in metrics


# --- the probe's flags --------------------------------------------------------------------------
def _spec(*argv):
    return make_spec(parser().parse_args(["--device", "cpu", *argv]))


def test_alloc_conf_comes_from_the_flag_else_the_environment(monkeypatch):
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert _spec()["alloc_conf"] == "expandable_segments:True"
    assert _spec("--alloc-conf", "max_split_size_mb:64")["alloc_conf"] == "max_split_size_mb:64"
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    assert _spec()["alloc_conf"] == ""
    spec = _spec("--alloc-device-gib", "80", "--cuda-memory-fraction", "0.5")
    assert settings_from_spec(spec).allowed_maximum == 40 * 2**30


def test_alloc_settings_change_the_config_hash_and_the_trace_flag_does_not():
    base = config_hash(_spec("--alloc-conf", ""), "2.1.0")
    assert config_hash(_spec("--alloc-conf", "expandable_segments:True"), "2.1.0") != base
    assert config_hash(_spec("--alloc-conf", "", "--alloc-device-gib", "80"), "2.1.0") != base
    assert config_hash(_spec("--alloc-conf", "", "--alloc-trace"), "2.1.0") == base


@pytest.mark.parametrize("argv, message", [
    (["--alloc-conf", "max_split_size_mb:4"], "max_split_size_mb too small, must be >= 20"),
    (["--alloc-conf", "expandable:True"], "unrecognized CachingAllocator option: expandable"),
    (["--alloc-device-gib", "0"], "--alloc-device-gib must be > 0"),
])
def test_bad_allocator_settings_are_one_line_errors(argv, message):
    with pytest.raises(SystemExit) as err:
        _spec(*argv)
    assert message in str(err.value) and "\n" not in str(err.value)


# --- names in the reports -----------------------------------------------------------------------
@pytest.mark.parametrize("name, label", [
    ("est_reserved_ga_cost_bytes_per_param", f"GA cost, {ESTIMATE}"),
    ("est_reserved_fp32_ga_cost_fixed_bytes", f"fp32 GA cost (fixed part), {ESTIMATE}"),
    ("est_reserved_peak_bytes.bf16.ga2.h256", f"bf16 GA=2 peak at h256, {ESTIMATE}"),
    ("bytes_per_param.bf16.ga2.est_reserved", f"bf16 GA=2 step bytes per parameter, {ESTIMATE}"),
    ("est_allocated_ga_excess_bytes_per_param",
     "GA excess, estimated CUDA allocated (allocator model, from the CPU trace)"),
    ("reserved_ga_cost_bytes_per_param", "GA cost, CUDA reserved"),
    ("reserved_peak_bytes.fp32.ga1.h64", "fp32 GA=1 peak at h64, CUDA reserved"),
])
def test_estimates_are_labelled_as_estimates_and_measurements_are_not(name, label):
    assert metric_label(name) == label


def test_a_cpu_result_leads_with_the_estimates_and_says_what_they_are():
    metrics, _ = derive(_cells(), ["fp32", "bf16"], [1, 2])
    explainer = GaMemoryExplainer()
    head = explainer.headline(metrics, None)
    assert "est_reserved_ga_cost_bytes_per_param" in head and "est_reserved_ga_excess_bytes_per_param" in head
    assert "not validated on a GPU" in explainer.meaning("est_reserved_ga_cost_bytes_per_param")
    details = explainer.compact({"cells": [{**c, "allocator_model": {"at_peak": {"fragmentation": 0.25}}}
                                           for c in _cells()]})
    line = explainer.one_version(metrics, details, None)[-1]
    assert line.startswith("Estimated CUDA reserved (allocator model, from the CPU trace; not measured")
    assert "bf16 GA=2 at h192 would reserve" in line and "25% of it unallocated" in line


def test_a_bisect_explanation_names_estimated_cost_moves_after_the_measured_ones():
    from bisector.explain.ga_memory.moves import _costs_sentence

    good = {"ga_cost_bytes_per_param": 1.0, "est_reserved_ga_cost_bytes_per_param": 1.2,
            "est_allocated_ga_cost_bytes_per_param": 1.0}
    bad = {"ga_cost_bytes_per_param": 1.9, "est_reserved_ga_cost_bytes_per_param": 2.3,
           "est_allocated_ga_cost_bytes_per_param": 2.0}
    (line,) = _costs_sentence(good, bad, None)
    assert line.index("GA cost rose by 0.900") < line.index(f"GA cost, {ESTIMATE} rose by 1.100")
    assert "estimated CUDA allocated" not in line
