"""End-to-end runs of the ga_memory probe as the orchestrator runs it: a subprocess with
$BISECTOR_RESULT set, on CPU, with the global interpreter's ML stack.

Set GA_MEMORY_EXTRA_PYTHONS to a comma-separated list of other interpreters (e.g. venvs with
accelerate 0.20.3 / transformers 4.30.2) to also run the default probe under each of them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from bisector.core.facts import ProbeResult
from tests.support.tinylm import tiny_lm_source

pytest.importorskip("torch")
pytest.importorskip("accelerate")
pytest.importorskip("transformers")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "probes", "ga_memory", "__main__.py")
SMALL = ["--sizes", "64,96,128"]



def run_probe(tmp_path, *args, python=sys.executable, name="result.json"):
    """Run the probe; returns (exit code, parsed result dict or None, seconds, stderr)."""
    out = tmp_path / name
    env = {**os.environ, "BISECTOR_RESULT": str(out)}
    start = time.perf_counter()
    proc = subprocess.run([python, SCRIPT, "--device", "cpu", *args], env=env, capture_output=True,
                          text=True, timeout=300)
    seconds = time.perf_counter() - start
    print(f"probe {' '.join(args) or '(defaults)'}: {seconds:.1f}s, exit {proc.returncode}")
    result = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, result, seconds, proc.stderr


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    return run_probe(tmp_path_factory.mktemp("default"), "--timings")


def _metrics(result):
    return ProbeResult.model_validate(result).metrics


def test_default_run_validates_and_fits(default_run):
    code, result, _, stderr = default_run
    assert code == 0, stderr[-3000:]
    metrics = _metrics(result)
    assert result["schema_version"] == "ga_memory/2" and result["meter"] == "cpu-dispatch"
    assert result["probe"]["version"] == "2.1.0" and len(result["probe"]["config_hash"]) == 64
    assert set(result["versions"]) == {"torch", "accelerate", "transformers", "python"}
    assert not any(c.get("error") for c in result["cells"])
    assert metrics["fit_r2_min"] > 0.99
    sizes = result["probe"]["config"]["sizes"]
    n_params = [metrics[f"n_params.h{h}"] for h in sizes]
    assert n_params == sorted(n_params) and len(set(n_params)) == len(n_params)
    for key in ("ga_cost_bytes_per_param", "fp32_ga_cost_bytes_per_param", "mixed_cost_bytes_per_param",
                "ga_excess_bytes_per_param", "ga_cost_fixed_bytes", "mixed_cost_fixed_bytes"):
        assert key in metrics
    for h in sizes:  # accumulating never lowers the peak, whatever zero_grad does
        for p in ("fp32", "bf16"):
            assert metrics[f"peak_bytes.{p}.ga2.h{h}"] >= metrics[f"peak_bytes.{p}.ga1.h{h}"]


def test_default_run_records_phases_attribution_and_timings(default_run):
    _, result, seconds, _ = default_run
    cell = next(c for c in result["cells"] if c["precision"] == "bf16" and c["ga"] == 2)
    assert list(cell["phases"])[:4] == ["m0.forward", "m0.backward", "m0.step", "m0.zero_grad"]
    assert cell["peak_phase"] in cell["phases"]
    assert sum(r["bytes"] for r in cell["attribution"]) == cell["peak_bytes"]
    timings = result["timings"]
    for key in ("imports_s", "model_build_s", "steps_s", "script_total_s"):
        assert timings[key] >= 0
    print(f"default probe run: {seconds:.1f}s wall; split: {timings}")


def test_seed_shape_with_set_to_none(tmp_path):
    """The seed's setting (current accelerate: zero_grad sets grads to None).

    Measured: bf16 GA costs ~1.9 B/param, fp32 GA ~0.6 B/param, and bf16 at GA=1 costs the
    same as fp32 (mixed cost ~0). Why: autocast keeps a bf16 copy of every cast weight alive for
    the whole forward (2 B/param). With GA=1 the grads were set to None, so the peak is at the
    end of backward (params + fp32 grads) in both precisions. With GA=2 the fp32 grads of
    micro-step 0 are alive during micro-step 1's forward, so that forward (params + grads + bf16
    weight copies) becomes the peak: the extra ~2 B/param of cast weights (less the uncast
    embedding) is the seed's excess. In fp32 there is no cast copy; what remains is the grads
    of micro-step 1 being added into the accumulated ones (the LM head's grad is large here).
    """
    code, result, _, stderr = run_probe(tmp_path, "--zero-grad-policy", "none")
    assert code == 0, stderr[-3000:]
    m = _metrics(result)
    assert m["ga_cost_bytes_per_param"] > m["fp32_ga_cost_bytes_per_param"] + 1.0
    assert m["ga_excess_bytes_per_param"] > 1.0
    assert abs(m["mixed_cost_bytes_per_param"]) < 0.05
    assert m["fit_r2_min"] > 0.99
    for cell in result["cells"]:
        if cell["precision"] == "bf16" and cell["ga"] == 2:
            assert cell["peak_phase"] == "m1.forward"
            assert any(r["site"].startswith("bfloat16") for r in cell["attribution"])


def test_grads_kept_as_zeros_make_ga_free(tmp_path):
    """zero_grad(set_to_none=False) (accelerate < 1.0's default): grads live through every
    forward, so GA adds nothing per parameter and the bf16 weight copies show up as mixed cost."""
    code, result, _, stderr = run_probe(tmp_path, "--zero-grad-policy", "zeros", *SMALL)
    assert code == 0, stderr[-3000:]
    m = _metrics(result)
    assert abs(m["ga_cost_bytes_per_param"]) < 0.01 and abs(m["fp32_ga_cost_bytes_per_param"]) < 0.01
    assert m["mixed_cost_bytes_per_param"] > 1.0


def test_two_runs_identical_bytes(default_run, tmp_path):
    _, first, _, _ = default_run
    code, second, _, _ = run_probe(tmp_path, "--timings")
    assert code == 0
    assert second["metrics"] == first["metrics"]
    strip = lambda cells: [{k: v for k, v in c.items() if k != "seconds"} for c in cells]  # noqa: E731
    assert strip(second["cells"]) == strip(first["cells"])
    assert second["probe"]["config_hash"] == first["probe"]["config_hash"]


def test_cells_in_forked_workers_give_the_same_result(default_run, tmp_path):
    """Workers forked after the imports measure every cell to the same byte and site as one process."""
    _, first, _, _ = default_run
    code, second, _, err = run_probe(tmp_path, "--workers", "2", "--timings")
    assert code == 0, err[-3000:]
    strip = lambda cells: [{k: v for k, v in c.items() if k != "seconds"} for c in cells]  # noqa: E731
    assert second["metrics"] == first["metrics"] and strip(second["cells"]) == strip(first["cells"])


def test_isolated_cells_measure_the_same_bytes(default_run, tmp_path):
    _, inproc, _, _ = default_run
    args = ["--isolate", "on", "--sizes", "64", "--precisions", "bf16", "--ga", "2"]
    code, result, _, stderr = run_probe(tmp_path, *args)
    assert code == 0, stderr[-3000:]
    (cell,) = result["cells"]
    assert cell["seconds"]["process"] > 0
    assert cell["peak_bytes"] == inproc["metrics"]["peak_bytes.bf16.ga2.h64"]


def test_llama_through_trainer(tmp_path):
    code, result, _, stderr = run_probe(tmp_path, "--arch", "llama", "--loop", "trainer", "--sizes", "64,128")
    assert code == 0, stderr[-3000:]
    m = _metrics(result)
    assert not any(c.get("error") for c in result["cells"])
    assert m["n_params.h128"] > m["n_params.h64"] and "ga_cost_bytes_per_param" in m
    assert "step" in result["cells"][-1]["phases"]


def test_nothing_measurable_exits_3_with_error(tmp_path):
    code, result, _, _ = run_probe(tmp_path, "--attn", "flash", "--sizes", "64", "--ga", "1",  # no flash-attn here
                                   "--precisions", "fp32")
    assert code == 3
    assert result["error"].startswith("no cell could be measured")
    assert result["cells"][0]["error"] and ProbeResult.model_validate(result).metrics == {}


def test_missing_ml_stack_exits_3_with_error(tmp_path):
    out = tmp_path / "r.json"
    env = {**os.environ, "BISECTOR_RESULT": str(out)}
    proc = subprocess.run([sys.executable, "-S", "-s", SCRIPT], env=env, capture_output=True, timeout=60)
    assert proc.returncode == 3
    assert "cannot import the ML stack" in ProbeResult.model_validate_json(out.read_text()).error


# --- the seed's loop: Trainer, both precisions in one run ---------------------------------------
OLDEST = "accelerate==0.20.3"   # the oldest release the probe supports (transformers 4.30 as of its date)
needs_index = pytest.mark.skipif(os.environ.get("BISECTOR_OFFLINE") == "1",
                                 reason="BISECTOR_OFFLINE=1: needs the real package index")


@pytest.fixture(scope="module")
def oldest_python(tmp_path_factory):
    """The interpreter of a real candidate environment of the oldest supported stack, built by
    bisector itself (default spec: transformers as of accelerate 0.20.3's upload, torch shared)."""
    root = tmp_path_factory.mktemp("oldest")
    proc = subprocess.run([sys.executable, "-m", "bisector", "probe", "--with", OLDEST, "--json",
                           "--store", str(root / "s.db"), "--cache-dir", str(root / "cache")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    env = json.loads(proc.stdout)["env"]["path"]
    return os.path.join(env, "bin", "python")


def _cell_bytes(result):
    return {(c["precision"], c["ga"], c["hidden"]): c["peak_bytes"] for c in result["cells"]}


def _trainer_both_equals_each(tmp_path, python):
    """Every cell of a Trainer run with both precisions has the bytes of runs of one precision each,
    and proves the precision it ran in (the fp32 cells after bf16 ones used to run in bf16)."""
    args = ["--loop", "trainer", "--precision-via", "env", *SMALL]
    code, both, _, err = run_probe(tmp_path, *args, python=python, name="both.json")
    assert code == 0 and not both.get("cell_errors"), err[-3000:]
    each = {}
    for prec in ("fp32", "bf16"):
        code, one, _, err = run_probe(tmp_path, *args, "--precisions", prec, python=python, name=f"{prec}.json")
        assert code == 0, err[-3000:]
        each.update(_cell_bytes(one))
    assert _cell_bytes(both) == each
    for cell in both["cells"]:
        want = "off" if cell["precision"] == "fp32" else "bfloat16"
        assert {o["autocast"] for o in cell["precision_observed"]} == {want}
        assert cell["grads_at_step_start"] == "none"  # Trainer's model.zero_grad(): set_to_none
    m = _metrics(both)
    assert m["fp32_ga_cost_bytes_per_param"] < 1.0 < m["ga_excess_bytes_per_param"]
    return both


def test_trainer_both_precisions_equal_single_precision_runs_newest(tmp_path):
    _trainer_both_equals_each(tmp_path, sys.executable)


@needs_index
def test_trainer_both_precisions_equal_single_precision_runs_oldest(tmp_path, oldest_python):
    result = _trainer_both_equals_each(tmp_path, oldest_python)
    assert result["versions"]["accelerate"] == "0.20.3" and result["versions"]["transformers"].startswith("4.30")


def test_knobs_separate_the_trainer_from_a_hand_written_loop(tmp_path):
    """Only the zero_grad knob moves the accelerate loop's GA cost to the Trainer's; clipping, the
    scheduler and setting the precision through the environment change no byte of it."""
    def costs(*args):
        code, result, _, err = run_probe(tmp_path, "--precisions", "fp32,bf16", *SMALL, *args)
        assert code == 0, err[-3000:]
        m = _metrics(result)
        return tuple(round(m[k], 6) for k in ("ga_cost_bytes_per_param", "fp32_ga_cost_bytes_per_param")), result

    zeros, plain = costs("--zero-grad-policy", "zeros")
    assert zeros == (0.0, 0.0) and plain["knobs"]["zero_grad_policy"] == "zeros"
    for knob in (["--max-grad-norm", "1.0"], ["--lr-scheduler", "constant"], ["--precision-via", "env"]):
        assert costs("--zero-grad-policy", "zeros", *knob)[0] == zeros, knob
    model, result = costs("--zero-grad-target", "model")
    assert model[0] > model[1] + 1.0 and result["cells"][0]["grads_at_step_start"] == "none"


def test_model_config_names_a_shape_or_reads_a_config_json(tmp_path):
    """A transformers config.json (here a 2-layer Pythia-like one) sets the family and every field;
    the seed's llama-7b is refused on this CPU in one line, before anything is built."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt_neox", "hidden_size": 96, "num_hidden_layers": 1,
                                  "num_attention_heads": 4, "intermediate_size": 192, "vocab_size": 300,
                                  "max_position_embeddings": 32, "rotary_pct": 0.5, "architectures": ["X"]}))
    code, result, _, err = run_probe(tmp_path, "--model-config", str(config), "--sizes", "64,96", "--ga", "1,2")
    assert code == 0, err[-3000:]
    cfg = result["probe"]["config"]
    assert (cfg["arch"], cfg["layers"], cfg["vocab"], cfg["shape"]) == (
        "gpt_neox", 1, 300, {"intermediate_size": 192, "rotary_pct": 0.5})
    assert "ga_cost_bytes_per_param" in result["metrics"]
    code, result, _, err = run_probe(tmp_path, "--model-config", "llama-7b", name="big.json")
    assert code == 3 and "6,738,415,616 parameters" in result["error"] and "GiB of memory is available" in err




def test_model_factory_measures_your_own_model(tmp_path, monkeypatch):
    (tmp_path / "tinylm.py").write_text(tiny_lm_source())
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    code, result, _, err = run_probe(tmp_path, "--model-factory", "tinylm:build", "--sizes", "32,64",
                                     "--seq-lens", "8,16", "--ga", "1,2")
    assert code == 0, err[-3000:]
    m = _metrics(result)
    assert not result.get("cell_errors") and result["cells"][0]["gradient_checkpointing"] == "not supported by this model"
    assert m["bytes_per_token.fp32.ga1.forward"] > 0 and "ga_excess_bytes_per_param" in m


def test_activations_profile_fits_bytes_per_token(tmp_path):
    code, result, seconds, err = run_probe(tmp_path, "--profile", "activations", "--precisions", "fp32", "--ga", "1")
    assert code == 0, err[-3000:]
    m = _metrics(result)
    assert result["probe"]["config"]["seq_lens"] == [64, 128, 256]
    assert {c["seq_len"] for c in result["cells"]} == {64, 128, 256}
    assert m["bytes_per_token.fp32.ga1.forward"] > 4 * 8192  # at least the fp32 logits of each token
    assert "peak_bytes.fp32.ga1.h64.t128" in m and "phase_peak_bytes.fp32.ga1.h128.t256.forward" in m


def test_skipped_fp16_steps_are_repeated_and_unproved_fp16_is_no_number(tmp_path):
    """A real GradScaler on the CPU with a huge initial scale overflows the first warm-up steps: they
    are repeated until one is not skipped, and counted. accelerate runs CPU fp16 without autocast,
    so the cell cannot prove fp16 and gives no bytes."""
    code, result, _, err = run_probe(tmp_path, "--precisions", "fp16", "--sizes", "64", "--ga", "1",
                                     "--fp16-init-scale", "1e38")
    (cell,) = result["cells"]
    assert code == 3 and cell["skipped_steps"] >= 1, err[-3000:]
    assert cell["error"].startswith("precision not proved: asked fp16") and "peak_bytes" not in cell


def test_cuda_requested_where_there_is_none_is_an_error_not_a_cpu_number(tmp_path):
    out = tmp_path / "r.json"
    env = {**os.environ, "BISECTOR_RESULT": str(out), "BISECTOR_DEVICE": "cuda", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, SCRIPT, "--sizes", "64", "--ga", "1"], env=env, capture_output=True,
                          text=True, timeout=300)
    result = json.loads(out.read_text())
    assert proc.returncode == 3 and result["metrics"] == {} and "CUDA" in result["error"]


def test_built_in_probe_runs_with_pythonsafepath(tmp_path, monkeypatch):
    """PYTHONSAFEPATH keeps the script's directory off sys.path; the probe finds its helpers anyway."""
    monkeypatch.setenv("PYTHONSAFEPATH", "1")
    code, result, _, err = run_probe(tmp_path, "--sizes", "64,96", "--precisions", "fp32", "--ga", "1")
    assert code == 0, err[-3000:]
    assert result["metrics"]["peak_bytes.fp32.ga1.h64"] > 0


EXTRA = [p for p in os.environ.get("GA_MEMORY_EXTRA_PYTHONS", "").split(",") if p]


@pytest.mark.skipif(not EXTRA, reason="GA_MEMORY_EXTRA_PYTHONS not set")
@pytest.mark.parametrize("python", EXTRA)
def test_default_run_under_other_interpreters(python, tmp_path):
    code, result, _, stderr = run_probe(tmp_path, "--timings", python=python)
    assert code == 0, stderr[-3000:]
    m = _metrics(result)
    print(python, result["versions"], {k: v for k, v in m.items() if "_cost" in k or "excess" in k})
    assert m["fit_r2_min"] > 0.99 and not any(c.get("error") for c in result["cells"])
