"""The slow half of tests/process/test_step_time.py: its tests that build real environments and run real probes."""
from __future__ import annotations

import pytest

from tests.process.test_step_time import TINY, run_probe  # noqa: F401 (helpers and fixtures)


def test_result_has_step_times_tokens_per_second_and_the_machine(tmp_path):
    code, result, err = run_probe(tmp_path, *TINY)
    assert code == 0, err
    assert result["schema_version"] == "step_time/1" and result["probe"]["name"] == "step_time"
    m, steps = result["metrics"], result["steps"]
    assert set(steps) == {"fp32", "bf16"} and all(len(ts) == 3 for ts in steps.values())  # warm-up not among them
    for prec, ts in steps.items():
        assert m[f"step_seconds.{prec}"] == sorted(ts)[1] and m[f"step_seconds_min.{prec}"] == min(ts)
        assert m[f"tokens_per_second.{prec}"] == pytest.approx(2 * 16 / m[f"step_seconds.{prec}"])
    assert m["step_seconds"] == m["step_seconds.fp32"] and result["tokens_per_step"] == 32
    device = result["device"]
    assert device["type"] == "cpu" and device["threads"] == 1 and device["cpu"] and device["cpu_count"] >= 1
    assert "clocks" not in device  # GPU clocks only where there is a GPU
    assert result["versions"]["torch"] and result["versions"]["transformers"]
    again, other = run_probe(tmp_path, *TINY)[1], run_probe(tmp_path, *TINY, "--seed", "3", "--precisions", "fp32")[1]
    assert again["first_loss"] == result["first_loss"] and again["n_params"] == result["n_params"]  # seeded
    assert other["first_loss"]["fp32"] != result["first_loss"]["fp32"] and set(other["steps"]) == {"fp32"}
    assert other["probe"]["config_hash"] != result["probe"]["config_hash"]


def test_bad_arguments_and_a_missing_gpu_are_one_line_errors(tmp_path):
    code, result, err = run_probe(tmp_path, "--precisions", "fp16")
    assert code == 2 and "--precisions takes fp32 and bf16, not fp16" in err and not result
    code, result, err = run_probe(tmp_path, *TINY, "--device", "cuda", env={"CUDA_VISIBLE_DEVICES": ""})
    assert code != 0 and "sees no CUDA device" in err and not result


def test_each_precision_is_proved_and_a_bf16_that_ran_in_fp32_is_an_error(tmp_path):
    code, result, err = run_probe(tmp_path, *TINY)
    assert code == 0, err
    assert result["precision_proof"] == {"fp32": {"linear_output_dtype": "float32", "autocast": False},
                                         "bf16": {"linear_output_dtype": "bfloat16", "autocast": True}}
    # a torch whose autocast does nothing (as a CPU build without bf16 autocast would): bf16 is not proved
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import contextlib, torch\n"
                                           "torch.autocast = lambda *a, **k: contextlib.nullcontext()\n")
    code, result, err = run_probe(tmp_path, *TINY, env={"PYTHONPATH": str(site)})
    assert code != 0 and not result
    assert "step_time: bf16 not proved: the first linear layer computed in float32 with autocast False" in err
