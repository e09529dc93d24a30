"""Unit tests of the ga_memory probe's helpers: meters, fits, result assembly, cell plumbing.

The probe's helpers live in probes/ga_memory/ and its meters in the probes' meter library probes/_meters/ (run
inside candidate environments, never importing bisector); the tests import them by putting both directories on
sys.path, as the script does.
"""
from __future__ import annotations

import json
import math
import os
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

PROBES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "probes")
sys.path[:0] = [os.path.join(PROBES, "ga_memory"), PROBES]

from _cli import config_hash, make_spec, parser  # noqa: E402
from _fit import derive, fit_line  # noqa: E402
from _meters.phases import MeterBase  # noqa: E402
from _meters.cpu import StorageMeter  # noqa: E402
from _meters.tensor_bytes import storage_objects_preserved  # noqa: E402  (probes/: the shared meter library)
from _meters.cuda import CudaMeter  # noqa: E402

from bisector.core.facts import ProbeResult  # noqa: E402

LIVENESS = ["sweep"] + (["finalize"] if storage_objects_preserved() else [])


# --- CPU meter: analytic cases ------------------------------------------------------------
def _linear_stack(layers, width):
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])


def _fwd_bwd(meter, model, x):
    meter.reset_peak()
    meter.mark("forward")
    loss = model(x).sum()
    meter.mark("backward")
    loss.backward()
    meter.mark(None)
    return loss


@pytest.mark.parametrize("liveness", LIVENESS)
def test_linear_stack_peaks_match_hand_count(liveness):
    """Peak live bytes of L bias-free Linear(D, D) layers on a (B, D) fp32 input, by hand.

    P = weights, X = one (B, D) activation, G = one (D, D) weight gradient; 4 B scalars.
    Forward: x, weights, h_1..h_L and the loss (h_L dies after ``sum``): P + X + L X + 4.
    Backward (G > 2X, so the peak is at the first layer's MmBackward): weights, x, the loss,
    the ``ones`` seed gradient, grad of h_1 and all L weight grads: P + 2X + L G + 8.
    """
    B, D, L = 4, 64, 3
    model, x = _linear_stack(L, D), torch.randn(B, D)
    meter = StorageMeter(liveness=liveness)
    meter.track(model.parameters())
    meter.track([x])
    with meter:
        loss = _fwd_bwd(meter, model, x)
    P, X, G = L * D * D * 4, B * D * 4, D * D * 4
    phases = meter.phases
    assert meter.start_bytes == P + X
    assert phases["forward"]["peak_bytes"] == P + X + L * X + 4
    assert phases["backward"]["peak_bytes"] == P + 2 * X + L * G + 8
    assert meter.peak == P + 2 * X + L * G + 8
    assert meter.peak_phase == "backward"
    # after backward returns: weights, x, weight grads and the loss (the seed grad is gone)
    assert meter.end_bytes == P + X + L * G + 4
    meter.close()
    del loss


@pytest.mark.parametrize("liveness", LIVENESS)
def test_token_fit_recovers_activation_bytes_per_token_by_hand(liveness):
    """L bias-free Linear(D, D) on a (1, T, D) input: the forward keeps x and h_1..h_L alive, so its
    peak is P + (L + 1) T D 4 + 4: exactly (L + 1) * D * 4 bytes per token over the weights."""
    from _fit import fit_plane

    L, D = 3, 32
    model = _linear_stack(L, D)
    peaks = {}
    for t in (4, 8, 16, 32):
        x = torch.randn(1, t, D)
        meter = StorageMeter(liveness=liveness)
        meter.track(model.parameters())
        meter.track([x])
        with meter:
            _fwd_bwd(meter, model, x)
        peaks[t] = meter.phases["forward"]["peak_bytes"]
        meter.close()
        for p in model.parameters():
            p.grad = None
    fit = fit_plane([0] * 4, list(peaks), list(peaks.values()))
    assert fit["c"] == (L + 1) * D * 4 and "a" not in fit
    assert fit["b"] == L * D * D * 4 + 4 and fit["r2"] == 1.0


@pytest.mark.parametrize("liveness", LIVENESS)
def test_views_share_one_storage(liveness):
    meter = StorageMeter(liveness=liveness)
    with meter:
        meter.reset_peak()
        base = torch.zeros(1000)
        views = [base[1:], base.view(10, 100), base.view(10, 100).t(), base.detach(), base[::2]]
        base.add_(1)  # in-place: same storage again
        assert meter.current == 4000
        del base
        assert meter.current == 4000  # views keep the storage alive
        del views
        assert meter.current == 0
        meter.mark(None)
    assert meter.peak == 4000
    meter.close()


@pytest.mark.parametrize("liveness", LIVENESS)
def test_pre_existing_tensors(liveness):
    tracked = torch.ones(256)  # 1024 B, registered explicitly
    untracked = torch.ones(128)  # 512 B, registered when first used by an op
    meter = StorageMeter(liveness=liveness)
    meter.track([tracked, None])
    with meter:
        meter.reset_peak()
        assert meter.current == 1024
        y = untracked * 2  # input registered (512) + output (512)
        assert meter.current == 1024 + 512 + 512
        del tracked
        assert meter.current == 512 + 512
        meter.mark(None)
    assert meter.peak == 2048
    assert meter.end_bytes == 1024
    meter.close()
    del y


def test_two_runs_identical_bytes():
    def run():
        model, x = _linear_stack(2, 32), torch.randn(3, 32)
        meter = StorageMeter(attribution=True)
        meter.track(model.parameters())
        with meter:
            _fwd_bwd(meter, model, x)
        meter.close()
        return meter.report(), meter.attribution()

    assert run() == run()


def test_attribution_names_backward_nodes_and_sums_to_peak():
    model, x = _linear_stack(2, 32), torch.randn(3, 32)
    meter = StorageMeter(attribution=True)
    meter.track(model.parameters(), site="parameters")
    with meter:
        _fwd_bwd(meter, model, x)
    rows = meter.attribution(top=50)
    assert sum(r["bytes"] for r in rows) == meter.peak
    assert any("MmBackward" in r["site"] and r["site"].startswith("float32") for r in rows)
    assert {"site": "parameters", "bytes": 2 * 32 * 32 * 4} in rows
    meter.close()


def test_other_device_storages_are_ignored():
    meter = StorageMeter(device_type="cuda")
    with meter:
        meter.reset_peak()
        torch.ones(100)
        meter.mark(None)
    assert meter.peak == 0
    meter.close()


# --- phase bookkeeping ----------------------------------------------------------------------
class _FakeMeter(MeterBase):
    def __init__(self):
        super().__init__()
        self.level = 0
        self.max = 0

    @property
    def current(self):
        return self.level

    def set(self, value):
        self.level = value
        self.max = max(self.max, value)

    def _open_phase_peak(self):
        self.max = self.level

    def _read_phase_peak(self):
        return self.max


def test_phase_bookkeeping():
    m = _FakeMeter()
    m.set(10)
    m.reset_peak()
    with m.phase("a"):
        m.set(50)
        m.set(20)
    m.mark("a")  # duplicate names get a suffix
    m.set(30)
    m.mark(None)
    m.set(999)  # after the window closed: not counted
    assert m.phases == {
        "a": {"start_bytes": 10, "peak_bytes": 50, "end_bytes": 20},
        "a#2": {"start_bytes": 20, "peak_bytes": 30, "end_bytes": 30},
    }
    assert (m.peak, m.peak_phase, m.start_bytes, m.end_bytes) == (50, "a", 10, 30)


def test_the_peak_before_the_first_phase_is_kept():
    """Trainer opens the window at on_step_begin; what it allocates before the first training_step
    (then frees) is part of the step's peak, on both meters."""
    m = _FakeMeter()
    m.set(10)
    m.reset_peak()
    m.set(80)  # no phase running yet
    m.set(15)
    m.mark("m0.forward")
    m.set(40)
    m.mark(None)
    assert (m.peak, m.phases["m0.forward"]["peak_bytes"]) == (80, 40)


@pytest.mark.parametrize("liveness", LIVENESS)
def test_sites_at_each_phase_peak_sum_to_that_phase_peak(liveness):
    model, x = _linear_stack(3, 32), torch.randn(4, 32)
    meter = StorageMeter(attribution=True, liveness=liveness)
    meter.track(model.parameters(), site="parameters")
    meter.track([x])
    with meter:
        _fwd_bwd(meter, model, x)
    by_phase = meter.phase_attribution(top=100)
    assert set(by_phase) == {"forward", "backward"}
    for name, rows in by_phase.items():
        assert sum(r["bytes"] for r in rows) == meter.phases[name]["peak_bytes"]
    assert not any("Backward" in r["site"] for r in by_phase["forward"])
    assert any("MmBackward" in r["site"] for r in by_phase["backward"])
    meter.close()


def test_cpu_meter_counts_what_the_window_created_by_dtype():
    meter = StorageMeter()
    old = torch.ones(10)
    meter.track([old])
    with meter:
        meter.reset_peak()
        a = old.to(torch.bfloat16)  # 20 B created in the window
        b = old * 2                 # 40 B
        meter.mark(None)
    assert meter.report()["dtype_bytes"] == {"bfloat16": 20, "float32": 40}
    meter.close()
    del a, b


# --- precision proof ------------------------------------------------------------------------
def _witnessed(precision_context):
    from _training.precision import PrecisionWitness

    model = _linear_stack(2, 16)
    witness = PrecisionWitness(model, "cpu")
    with precision_context:
        model(torch.randn(2, 16))
    witness.close()
    return witness


def test_precision_witness_proves_what_the_forward_ran_in():
    import contextlib

    fp32 = _witnessed(contextlib.nullcontext())
    bf16 = _witnessed(torch.autocast("cpu", dtype=torch.bfloat16))
    assert fp32.problem("fp32") is None and bf16.problem("bf16") is None
    assert fp32.observed() == [{"autocast": "off", "output": "float32", "calls": 1}]
    assert bf16.observed() == [{"autocast": "bfloat16", "output": "bfloat16", "calls": 1}]
    leaked = bf16.problem("fp32")  # the seed bug: an fp32 cell that ran under autocast
    assert leaked.startswith("asked fp32, but 1 forward call(s) ran with autocast bfloat16")
    assert "asked bf16" in fp32.problem("bf16")


def test_precision_witness_needs_a_forward_and_agreeing_meter_dtypes():
    from _training.precision import PrecisionWitness

    silent = PrecisionWitness(_linear_stack(1, 8), "cpu")
    assert "never observed" in silent.problem("fp32")
    fp32 = _witnessed(torch.autocast("cpu", enabled=False))
    assert "allocated 64 B of bfloat16" in fp32.problem("fp32", {"bfloat16": 64, "float32": 10})
    bf16 = _witnessed(torch.autocast("cpu", dtype=torch.bfloat16))
    assert "no bfloat16 tensor" in bf16.problem("bf16", {"float32": 10})


def test_a_cell_leaves_the_process_environment_as_it_found_it(monkeypatch):
    from _cells import process_state

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # e.g. from the user's shell
    monkeypatch.setenv("UNRELATED", "1")
    with process_state():
        assert "ACCELERATE_MIXED_PRECISION" not in os.environ and os.environ["UNRELATED"] == "1"
        os.environ["ACCELERATE_MIXED_PRECISION"] = "fp16"  # what TrainingArguments does
        os.environ["NEW"] = "x"
    assert os.environ["ACCELERATE_MIXED_PRECISION"] == "bf16" and "NEW" not in os.environ


def test_loop_knobs_resolve_to_what_each_loop_does():
    from _cli import effective_knobs

    acc, trainer = _spec(), _spec("--loop", "trainer")
    assert (acc["zero_grad_target"], acc["max_grad_norm"], acc["lr_scheduler"]) == ("optimizer", 0.0, "none")
    assert (trainer["zero_grad_target"], trainer["max_grad_norm"], trainer["lr_scheduler"]) == (
        "model", 1.0, "constant")
    like_trainer = _spec("--zero-grad-target", "model", "--max-grad-norm", "1", "--lr-scheduler", "constant")
    assert effective_knobs(like_trainer)["implied_by_loop"] == ["precision_via", "zero_grad_policy"]
    assert config_hash(_spec("--loop", "trainer", "--max-grad-norm", "1.0"), "2") == config_hash(trainer, "2")
    with pytest.raises(SystemExit, match="decided by Trainer"):
        _spec("--loop", "trainer", "--zero-grad-policy", "zeros")
    with pytest.raises(SystemExit):
        _spec("--max-grad-norm", "-1")


# --- CUDA meter with a stand-in for torch.cuda (CI has no GPU) -------------------------------
class _FakeCuda:
    """Counters with the semantics of torch.cuda's: peaks since the last reset."""

    def __init__(self):
        self.allocated, self.reserved, self.max_alloc, self.max_res, self.max_requested = 0, 0, 0, 0, 0

    def alloc(self, n):
        self.allocated += n
        self.reserved = max(self.reserved, self.allocated + 100)
        self.max_alloc = max(self.max_alloc, self.allocated)
        self.max_res = max(self.max_res, self.reserved)
        self.max_requested = max(self.max_requested, self.allocated - 7)  # blocks round up

    def synchronize(self, device=None):
        pass

    def memory_allocated(self, device=None):
        return self.allocated

    def memory_reserved(self, device=None):
        return self.reserved

    def max_memory_allocated(self, device=None):
        return self.max_alloc

    def max_memory_reserved(self, device=None):
        return self.max_res

    def memory_stats(self, device=None):
        return {"requested_bytes.all.peak": self.max_requested}

    def reset_peak_memory_stats(self, device=None):
        self.max_alloc, self.max_res, self.max_requested = self.allocated, self.reserved, self.allocated - 7


class _FakePynvml:
    """The pynvml calls NvmlProbe makes, over four GPUs; memory used = 1000 x the physical index."""

    UUIDS = ["GPU-aaaa", "GPU-bbbb", "GPU-cccc", "MIG-dddd"]

    class _Memory:
        def __init__(self, used):
            self.used = used

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.UUIDS:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return self.UUIDS.index(uuid)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetMemoryInfo(self, handle):
        return self._Memory(1000 * handle)

    def nvmlSystemGetDriverVersion(self):
        return b"550.54.15"

    def nvmlDeviceGetMigMode(self, handle):
        if handle == 3:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return (0, 0)


def test_nvml_reads_the_gpu_torch_sees_by_uuid_not_physical_gpu_0():
    """With CUDA_VISIBLE_DEVICES=2 torch's device 0 is physical GPU 2; NVML must read GPU 2."""
    from _meters.cuda import NvmlProbe, uuid_candidates

    probe = NvmlProbe(uuid="cccc", nvml=_FakePynvml())  # torch reports the UUID without a prefix
    assert (probe.uuid, probe.used_bytes(), probe.driver(), probe.mig_mode()) == ("GPU-cccc", 2000, "550.54.15", "off")
    mig = NvmlProbe(uuid="MIG-dddd", nvml=_FakePynvml())
    assert (mig.used_bytes(), mig.mig_mode()) == (3000, "instance")
    missing = NvmlProbe(uuid="zzzz", nvml=_FakePynvml())
    assert missing.used_bytes() is None and "no device with UUID zzzz" in missing.unavailable
    assert NvmlProbe(uuid=None, nvml=_FakePynvml()).unavailable.startswith("torch reports no UUID")
    assert uuid_candidates("GPU-1") == ["GPU-1"] and uuid_candidates("1") == ["GPU-1", "MIG-1"]


def _cuda_window(reset):
    from _meters.cuda import NvmlProbe

    cuda = _FakeCuda()
    meter = CudaMeter(backend=cuda, nvml=NvmlProbe(uuid="GPU-bbbb", nvml=_FakePynvml()), reset=reset)
    cuda.alloc(1000)
    meter.reset_peak()
    meter.mark("m0.forward")
    cuda.alloc(500)
    cuda.alloc(-400)
    meter.mark("m0.backward")
    cuda.alloc(200)
    meter.mark(None)
    return meter.report()


def test_cuda_meter_phases_with_fake_backend():
    report = _cuda_window("phase")
    assert report["phases"]["m0.forward"] == {"start_bytes": 1000, "peak_bytes": 1500, "end_bytes": 1100}
    assert report["phases"]["m0.backward"] == {"start_bytes": 1100, "peak_bytes": 1300, "end_bytes": 1300}
    assert (report["peak_bytes"], report["peak_phase"]) == (1500, "m0.forward")
    assert report["reserved_peak_bytes"] == 1600 and report["requested_peak_bytes"] == 1493
    assert report["nvml_device_used_at_marks_max_bytes"] == 1000  # device-wide, sampled: not a peak
    assert "nvml_used_max_bytes" not in report


def test_cuda_peak_reset_only_at_the_window_start_gives_the_same_step_peak():
    assert _cuda_window("window")["peak_bytes"] == _cuda_window("phase")["peak_bytes"] == 1500


def test_cuda_meter_says_when_nvml_is_unavailable():
    from _meters.cuda import NvmlProbe

    meter = CudaMeter(backend=_FakeCuda(), nvml=NvmlProbe(uuid="x", nvml=None))
    meter.reset_peak()
    meter.mark(None)
    assert meter.report()["nvml_unavailable"] == "no reading" and meter.attribution() == []


def test_the_command_meters_cuda_part_reads_the_allocator_per_step_and_nvml_by_its_mig_uuid():
    """The command meter's CUDA part (probes/command/_parts.py) through the meter library: a step's peak and end
    counters, the peak reset for the next step, and NVML found by the UUID torch reports without its prefix,
    here a MIG instance's (the meter's own NVML code tried ``GPU-`` only)."""
    import types

    import _meters.cuda as cuda_library

    sys.path.insert(0, os.path.join(PROBES, "command"))
    from _parts import CudaCounters

    cuda = _FakeCuda()
    cuda.is_initialized = lambda: True
    cuda.current_device = lambda: 0
    cuda.get_device_name = lambda dev: "Fake H200"
    cuda.get_device_properties = lambda dev: types.SimpleNamespace(uuid="dddd")
    part = CudaCounters(cuda_library, nvml=_FakePynvml())
    assert part.kind == "cuda" and part.start(types.SimpleNamespace(cuda=cuda)) == {}
    cuda.alloc(1000)
    cuda.alloc(-600)
    step = {}
    part.step_end(None, step)
    assert step == {"cuda_peak_allocated": 1000, "cuda_peak_reserved": 1100, "cuda_end_allocated": 400,
                    "cuda_end_reserved": 1100, "cuda_device": "Fake H200", "nvml_used": 3000}
    cuda.alloc(200)
    step = {}
    part.step_end(None, step)
    assert step["cuda_peak_allocated"] == 600 and part.nvml.uuid == "MIG-dddd"   # reset at the step's end
    end = {}
    part.end(end)
    assert end == {"cuda_initialized": True, "cuda_run_peak_allocated": 1000, "cuda_run_peak_reserved": 1100}


# --- fits and derived metrics ---------------------------------------------------------------
def test_fit_line_exact_and_r2():
    fit = fit_line([1, 2, 3, 4], [5, 7, 9, 11])
    assert (fit["a"], fit["b"], fit["r2"]) == (2.0, 3.0, 1.0)
    assert fit_line([1, 2, 3], [4, 4, 4])["r2"] == 1.0
    noisy = fit_line([1, 2, 3, 4], [1, 3, 2, 4])
    assert 0 < noisy["r2"] < 1
    with pytest.raises(ValueError):
        fit_line([1, 1], [2, 3])


def _synthetic_cells(failed: bool = True):
    """peak = a * n + b with known per-(precision, GA) slopes and intercepts (and one OOM cell)."""
    sizes = {64: 1000, 128: 3000, 192: 6000}
    slope = {("fp32", 1): 8, ("fp32", 2): 8.5, ("bf16", 1): 9, ("bf16", 2): 11}
    cells = [
        {"hidden": h, "precision": p, "ga": g, "n_params": n, "peak_bytes": slope[p, g] * n + 100 * g}
        for h, n in sizes.items() for (p, g) in slope
    ]
    if failed:
        cells.append({"hidden": 256, "precision": "bf16", "ga": 2,
                      "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB"})
    return cells


def test_a_failed_cell_removes_the_fits_it_would_enter():
    """A cost fitted over the widths that happened to survive is another number under the same name."""
    metrics, fits = derive(_synthetic_cells(), ["fp32", "bf16"], [1, 2])
    assert "peak_bytes.bf16.ga2.h256" not in metrics and metrics["peak_bytes.bf16.ga2.h128"] == 11 * 3000 + 200
    for gone in ("ga_cost_bytes_per_param", "ga_excess_bytes_per_param"):
        assert gone not in metrics  # they need bf16 GA=2 at every width
    assert "peak.bf16.ga2" not in fits and "peak.fp32.ga2" not in fits  # fp32 lacks h256 too
    assert fits == {} and "fit_r2_min" not in metrics


def test_derive_metrics_from_synthetic_cells():
    metrics, fits = derive(_synthetic_cells(failed=False), ["fp32", "bf16"], [1, 2])
    close = lambda k, v: math.isclose(metrics[k], v, rel_tol=1e-9, abs_tol=1e-6)  # noqa: E731
    assert close("ga_cost_bytes_per_param", 2.0) and close("ga_cost_fixed_bytes", 100)
    assert close("fp32_ga_cost_bytes_per_param", 0.5) and close("fp32_ga_cost_fixed_bytes", 100)
    assert close("mixed_cost_bytes_per_param", 1.0) and close("mixed_cost_fixed_bytes", 0)
    assert close("ga_excess_bytes_per_param", 1.5) and close("ga_excess_fixed_bytes", 0)
    assert close("fit_r2_min", 1.0)
    assert metrics["peak_bytes.bf16.ga2.h128"] == 11 * 3000 + 200
    assert metrics["n_params.h192"] == 6000.0
    assert set(fits) >= {"peak.fp32.ga1", "ga_cost", "fp32_ga_cost", "mixed_cost", "ga_excess"}


def test_one_model_size_gives_ratios_as_the_seed_computed_them():
    """With one size there is no slope: the GA cost is the difference over the parameters."""
    cells = [c for c in _synthetic_cells() if c.get("hidden") == 64]
    metrics, fits = derive(cells, ["fp32", "bf16"], [1, 2])
    assert metrics["peak_bytes.fp32.ga1.h64"] == 8000 + 100 and "fit_r2_min" not in metrics
    assert math.isclose(metrics["ga_cost_bytes_per_param"], (11 * 1000 + 200 - 9 * 1000 - 100) / 1000)
    assert fits["ga_cost"]["kind"] == "ratio" and "ga_cost_fixed_bytes" not in metrics


def test_derive_omits_what_cannot_be_fitted():
    cells = [c for c in _synthetic_cells(failed=False) if c.get("hidden") in (64, 128)]
    cells = [{**c, "n_params": 1000} for c in cells]  # two sizes with one parameter count: no slope
    metrics, fits = derive(cells, ["fp32", "bf16"], [1, 2])
    assert "ga_cost_bytes_per_param" not in metrics and "fit_r2_min" not in metrics and fits == {}


def test_phase_peaks_and_the_token_axis():
    """peak = a * params + c * tokens + b per group and phase, recovered exactly."""
    cells = []
    for h, n in ((64, 1000), (128, 3000)):
        for t in (8, 32):
            for prec, ga in (("fp32", 1), ("bf16", 1)):
                fwd = 2 * n + 50 * t + 7 + (n if prec == "bf16" else 0)
                phases = {"m0.forward": {"peak_bytes": fwd}, "m0.backward": {"peak_bytes": n + 10 * t}}
                cells.append({"hidden": h, "seq_len": t, "tokens": t, "precision": prec, "ga": ga, "n_params": n,
                              "peak_bytes": max(fwd, n + 10 * t), "phases": phases})
    metrics, fits = derive(cells, ["fp32", "bf16"], [1])
    assert metrics["phase_peak_bytes.fp32.ga1.h64.t32.forward"] == 2000 + 1600 + 7
    assert math.isclose(metrics["bytes_per_token.fp32.ga1.forward"], 50)
    assert math.isclose(metrics["bytes_per_param.fp32.ga1.forward"], 2)
    assert math.isclose(metrics["fixed_bytes.fp32.ga1.forward"], 7, abs_tol=1e-6)
    assert math.isclose(metrics["bytes_per_token.bf16.ga1.backward"], 10)
    assert math.isclose(metrics["mixed_cost_bytes_per_param"], 1) and abs(fits["mixed_cost"]["c"]) < 1e-9


# --- result assembly and writing ------------------------------------------------------------
def _spec(*argv):
    return make_spec(parser().parse_args(["--device", "cpu", *argv]))


def test_assembled_result_validates_and_cleans_non_finite(monkeypatch, tmp_path):
    from _result import assemble, write

    spec = _spec()
    metrics, fits = derive(_synthetic_cells(), spec["precisions"], spec["ga"])
    cells = _synthetic_cells() + [{"hidden": 1, "precision": "fp32", "ga": 1, "odd": float("nan")}]
    probe = {"name": "ga_memory", "version": "1.0.0", "config_hash": config_hash(spec, "1.0.0")}
    result = assemble(probe, spec, cells, {**metrics, "bad": float("inf")}, fits)
    assert "bad" not in result["metrics"] and result["cells"][-1]["odd"] is None
    assert result["cell_errors"] == 1 and result["versions"]["torch"] == torch.__version__
    target = tmp_path / "out.json"
    monkeypatch.setenv("BISECTOR_RESULT", str(target))
    assert write(result) == str(target)
    parsed = ProbeResult.model_validate_json(target.read_text())
    assert parsed.schema_version == "ga_memory/2" and parsed.meter == "cpu-dispatch"
    assert result["oom_cells"] == ["bf16.ga2.h256"]
    assert parsed.probe["config_hash"] == probe["config_hash"]


def test_write_falls_back_to_path_then_stdout(monkeypatch, tmp_path, capsys):
    from _result import write

    monkeypatch.delenv("BISECTOR_RESULT", raising=False)
    assert write({"metrics": {"x": 1.0}}, str(tmp_path / "r.json")) == str(tmp_path / "r.json")
    assert write({"metrics": {"x": 2.0}}) == "<stdout>"
    assert json.loads(capsys.readouterr().out) == {"metrics": {"x": 2.0}}


def test_config_hash_tracks_measurement_knobs_only():
    base = config_hash(_spec(), "1.0.0")
    assert base == config_hash(_spec(), "1.0.0")
    assert base == config_hash(_spec("--no-attribution", "--isolate", "on", "--top", "3"), "1.0.0")
    assert base != config_hash(_spec("--ga", "1,4"), "1.0.0")
    assert base != config_hash(_spec(), "1.0.1")


def test_cli_rejects_bad_sizes_lengths_and_families():
    with pytest.raises(SystemExit, match="divisible by --heads 4"):
        _spec("--sizes", "66", "--heads", "4")
    with pytest.raises(SystemExit, match="between 1 and --max-positions"):
        _spec("--seq-lens", "8,128")
    with pytest.raises(SystemExit, match="--arch must be one of"):
        _spec("--arch", "bert")
    with pytest.raises(SystemExit, match="neither a known shape"):
        _spec("--model-config", "no-such-model")


def test_the_orchestrators_device_wins_over_auto(monkeypatch):
    monkeypatch.setenv("BISECTOR_DEVICE", "cuda")
    spec = make_spec(parser().parse_args([]))
    assert (spec["device"], spec["device_requested"]) == ("cuda", "cuda")
    monkeypatch.delenv("BISECTOR_DEVICE")
    assert make_spec(parser().parse_args(["--device", "cpu"]))["device_requested"] == "cpu"


# --- subprocess-per-cell plumbing -----------------------------------------------------------
def _fake_cell_script(tmp_path, body):
    script = tmp_path / "fake_probe.py"
    script.write_text(textwrap.dedent(body))
    return str(script)


def test_isolated_cell_round_trip(tmp_path, monkeypatch):
    from _cells import run_cell_isolated

    monkeypatch.setenv("BISECTOR_RESULT", str(tmp_path / "must_not_be_written"))
    script = _fake_cell_script(tmp_path, """
        import json, os, sys
        args = sys.argv[1:]
        cell = json.loads(args[args.index("--cell") + 1])
        out = args[args.index("--cell-out") + 1]
        print("noise on stdout")
        json.dump({**cell, "peak_bytes": 123, "argv": args[:2],
                   "env_result": os.environ.get("BISECTOR_RESULT")}, open(out, "w"))
    """)
    record = run_cell_isolated(script, ["--sizes", "64"], {"hidden": 64, "precision": "fp32", "ga": 1}, 60)
    assert record["peak_bytes"] == 123 and record["argv"] == ["--sizes", "64"]
    assert record["env_result"] is None  # the child never writes the run's result file
    assert record["seconds"]["process"] > 0


def test_isolated_cell_crash_and_timeout_become_cell_errors(tmp_path):
    from _cells import run_cell_isolated

    cell = {"hidden": 64, "precision": "bf16", "ga": 2}
    crash = _fake_cell_script(tmp_path, "import sys; print('CUDA out of memory'); sys.exit(-9 % 256)")
    record = run_cell_isolated(crash, [], cell, 60)
    assert "exited 247" in record["error"] and "out of memory" in record["error"]
    assert record["hidden"] == 64
    (tmp_path / "fake_probe.py").write_text("import time; time.sleep(30)")
    assert "timed out" in run_cell_isolated(str(tmp_path / "fake_probe.py"), [], cell, 0.5)["error"]
