"""The ga_memory probe's allocator-model estimates end to end: a real CPU run, its est_* metrics, the
traces it keeps replayed on the host to the same numbers, and allocator settings from the flag."""
from __future__ import annotations

import os
import sys

import pytest

from tests.slow.test_probe_run import run_probe

pytest.importorskip("transformers")

sys.path[:0] = [os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "probes", "ga_memory")]

from _allocator_model.conf import parse_alloc_conf  # noqa: E402
from _allocator_model.replay import replay  # noqa: E402
from _allocator_model.trace import Trace  # noqa: E402

MIB = 1024 * 1024
ARGS = ["--sizes", "64,128", "--alloc-trace", "--alloc-conf", ""]


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory):
    return run_probe(tmp_path_factory.mktemp("traced"), *ARGS)


def test_every_cell_estimates_reserved_and_the_costs_are_fitted(traced_run):
    code, result, _, stderr = traced_run
    assert code == 0, stderr[-3000:]
    metrics = result["metrics"]
    for key in ("est_reserved_ga_cost_bytes_per_param", "est_reserved_fp32_ga_cost_bytes_per_param",
                "est_reserved_ga_excess_bytes_per_param", "est_reserved_mixed_cost_bytes_per_param",
                "bytes_per_param.bf16.ga2.est_reserved", "est_allocated_ga_cost_bytes_per_param"):
        assert key in metrics
    for cell in result["cells"]:
        model = cell["allocator_model"]
        assert model["settings"] == "torch defaults" and "error" not in model
        assert cell["est_reserved_peak_bytes"] >= cell["est_allocated_peak_bytes"] >= cell["peak_bytes"]
        assert model["requested_peak_bytes"] == cell["peak_bytes"]  # nothing is resized in these steps
        assert cell["est_reserved_peak_bytes"] % (2 * MIB) == 0  # whole segments
        assert metrics[f"est_reserved_peak_bytes.{cell['precision']}.ga{cell['ga']}.h{cell['hidden']}"] == \
            cell["est_reserved_peak_bytes"]


def test_kept_traces_replay_on_the_host_to_the_probes_numbers(traced_run):
    _, result, _, _ = traced_run
    for cell in result["cells"]:
        again = replay(Trace.from_json(cell["alloc_trace"]))
        assert again["est_reserved_peak_bytes"] == cell["est_reserved_peak_bytes"]
        assert again["at_peak"] == cell["allocator_model"]["at_peak"]
        expandable = replay(Trace.from_json(cell["alloc_trace"]), parse_alloc_conf("expandable_segments:True"))
        assert expandable["est_reserved_peak_bytes"] >= expandable["est_allocated_peak_bytes"] >= cell["peak_bytes"]


def test_allocator_settings_from_the_environment_and_bad_ones_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    code, result, _, stderr = run_probe(tmp_path, "--sizes", "64", "--precisions", "bf16", "--ga", "1")
    assert code == 0, stderr[-3000:]
    (cell,) = result["cells"]
    assert result["probe"]["config"]["alloc_conf"] == "expandable_segments:True"
    assert cell["allocator_model"]["settings"] == "expandable_segments:True"
    code, result, _, stderr = run_probe(tmp_path, "--alloc-conf", "max_split_size_mb:8", name="bad.json")
    assert code != 0 and result is None
    assert stderr.strip().splitlines()[-1] == ("--alloc-conf 'max_split_size_mb:8': max_split_size_mb too small, "
                                                "must be >= 20")
