"""bench/gpu_first: the dry run (``DEV=cpu``) end to end, the runner's budget and timeouts, every
check able to fail, and the host side over what a run brings back (item 2 of issue 29).

What a GPU run brings back is fed through the host's parsing (the probe-result replayed through
``run_probe``), the device check of the measurer, the judge and the matrix: here the dry run's
results, and the recorded fixtures of a real GPU run in ``tests/fixtures/gpu_first/`` (none yet:
no GPU was lent to the session that wrote this; ``docs/gpu.md`` says how to record them).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from bisector.bisection.judge import judge
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.criterion import Criterion, calibrate
from bisector.core.measurement import Measurement, Status
from bisector.core.verdict import Verdict
from bisector.envs import EnvManager, EnvSpec
from bisector.matrix.cells import Cell, Slot
from bisector.matrix.compare import compare, summarise
from bisector.matrix.grid_result import BaselineCell, CellVerdict
from bisector.measure.gpus import GpuPool, parse_gpu_list
from bisector.measure.measurer import Measurer
from bisector.measure.probe_process import run_probe
from bisector.measure.probe_spec import ProbeSpec
from bisector.storage import Store

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "gpu_first"
FIXTURES = ROOT / "tests" / "fixtures" / "gpu_first"
sys.path.insert(0, str(BENCH))

import gf  # noqa: E402
import verdicts  # noqa: E402
from report import verdict as overall  # noqa: E402

GPU_SECONDS = 6 * 60


# --- the plan ------------------------------------------------------------------------------------
def test_every_step_has_its_file_and_the_plan_fits_six_gpu_minutes():
    steps = gf.planned_steps()
    assert [s[0] for s in steps] == ["facts", "meter", "invariants", "resets", "precision", "oom", "seed", "allocator"]
    assert all((BENCH / f"{name}.py").is_file() for name, _, _ in steps)
    assert sum(planned for _, planned, _ in steps) <= GPU_SECONDS
    for name, planned, _ in steps:  # each step's docstring states the plan the runner holds
        assert f"planned {planned:g} s on a GPU" in (BENCH / f"{name}.py").read_text()


# --- every check can fail -----------------------------------------------------------------------
def _cell(prec="fp32", ga=1, hidden=1024, **kw):
    return {"precision": prec, "ga": ga, "hidden": hidden, "n_params": 1000, **kw}


def _result(*cells, **kw):
    return {"cells": list(cells), **kw}


GOOD_CUDA = _cell(peak_bytes=100, requested_peak_bytes=90, reserved_peak_bytes=120,
                  nvml_device_used_at_marks_max_bytes=500)


@pytest.mark.parametrize("verdict, expected", [
    (verdicts.all_measured(0, _result(_cell(peak_bytes=1))), "PASS"),
    (verdicts.all_measured(0, None), "FAIL"),
    (verdicts.all_measured(0, _result(_cell(peak_bytes=1), _cell(ga=2, error="OutOfMemoryError"))), "FAIL"),
    (verdicts.all_measured(1, _result(_cell(peak_bytes=1))), "FAIL"),
    (verdicts.meter_vs_reference(_result(_cell(peak_bytes=1000)), {"cells": {"fp32.ga1.h1024": 1005}}), "PASS"),
    (verdicts.meter_vs_reference(_result(_cell(peak_bytes=1000)), {"cells": {"fp32.ga1.h1024": 1020}}), "FAIL"),
    (verdicts.meter_vs_reference(_result(_cell(peak_bytes=1000)), {"cells": {"fp32.ga1.h1024": None}}), "FAIL"),
    (verdicts.meter_vs_reference(_result(_cell(peak_bytes=1000)), None), "FAIL"),
    (verdicts.invariants(_result(GOOD_CUDA)), "PASS"),
    (verdicts.invariants(_result({**GOOD_CUDA, "requested_peak_bytes": 101})), "FAIL"),
    (verdicts.invariants(_result({**GOOD_CUDA, "reserved_peak_bytes": 99})), "FAIL"),
    (verdicts.invariants(_result({**GOOD_CUDA, "nvml_device_used_at_marks_max_bytes": 110})), "FAIL"),
    (verdicts.invariants(_result({k: v for k, v in GOOD_CUDA.items() if not k.startswith("nvml")})), "FAIL"),
    (verdicts.invariants(_result()), "FAIL"),
    (verdicts.same_peaks(_result(_cell(peak_bytes=100)), _result(_cell(peak_bytes=100)), "x"), "PASS"),
    (verdicts.same_peaks(_result(_cell(peak_bytes=100)), _result(_cell(peak_bytes=150)), "x"), "FAIL"),
    (verdicts.same_peaks(_result(_cell(peak_bytes=100)), None, "x"), "FAIL"),
    (verdicts.whole_oom(3, _result(_cell(error="OOM"), oom_cells=["fp32.ga1.h1024"])), "PASS"),
    (verdicts.whole_oom(0, _result(_cell(error="OOM"), oom_cells=["fp32.ga1.h1024"])), "FAIL"),
    (verdicts.whole_oom(3, _result(_cell(error="OOM"), _cell(ga=2, error="x"), oom_cells=["fp32.ga1.h1024"])), "FAIL"),
    (verdicts.partial_oom(0, _result(_cell(peak_bytes=1), _cell(hidden=2048, error="OOM"),
                                     oom_cells=["fp32.ga1.h2048"]), ["fp32.ga1.h2048"]), "PASS"),
    (verdicts.partial_oom(0, _result(_cell(error="OOM"), _cell(hidden=2048, error="OOM"),
                                     oom_cells=["fp32.ga1.h1024", "fp32.ga1.h2048"]), ["fp32.ga1.h2048"]), "FAIL"),
    (verdicts.partial_oom(3, _result(_cell(hidden=2048, error="OOM"), oom_cells=["fp32.ga1.h2048"]),
                          ["fp32.ga1.h2048"]), "FAIL"),
    (verdicts.seed_criteria({"bf16": {"allocated": 1.6}, "fp32": {"allocated": 0.29}}), "PASS"),
    (verdicts.seed_criteria({"bf16": {"allocated": 1.2}, "fp32": {"allocated": 0.29}}), "FAIL"),
    (verdicts.seed_criteria({"bf16": {"allocated": 1.9}, "fp32": {"allocated": 0.35}}), "FAIL"),
    (verdicts.seed_criteria({"fp32": {"allocated": 0.1}}), "FAIL"),
])
def test_each_check_passes_only_on_what_it_claims(verdict, expected):
    assert verdict[0] == expected, verdict


def _phases(*peaks):
    return {f"p{i}": {"peak_bytes": p} for i, p in enumerate(peaks)}


def test_the_reset_check_proves_the_flag_reached_the_meter():
    phase = _result(_cell(peak_bytes=30, cuda_reset="phase", phases=_phases(30, 10, 20)))
    window = _result(_cell(peak_bytes=30, cuda_reset="window", phases=_phases(30, 30, 30)))
    assert verdicts.resets(phase, window)[0] == "PASS"
    never_reset = _result(_cell(peak_bytes=30, cuda_reset="phase", phases=_phases(30, 30, 30)))
    assert verdicts.resets(never_reset, window)[0] == "FAIL"          # the flag ignored: always window mode
    one_never_reset = _result(phase["cells"][0], _cell(ga=2, peak_bytes=30, cuda_reset="phase", phases=_phases(30, 30)))
    assert verdicts.resets(one_never_reset, _result(window["cells"][0], _cell(
        ga=2, peak_bytes=30, cuda_reset="window", phases=_phases(30, 30))))[0] == "FAIL"
    reset_anyway = _result(_cell(peak_bytes=30, cuda_reset="window", phases=_phases(30, 10, 20)))
    assert verdicts.resets(phase, reset_anyway)[0] == "FAIL"
    unsaid = _result(_cell(peak_bytes=30, phases=_phases(30, 30, 30)))
    assert verdicts.resets(phase, unsaid)[0] == "FAIL"                # the meter did not say its mode
    other_peak = _result(_cell(peak_bytes=31, cuda_reset="window", phases=_phases(30, 31, 31)))
    assert verdicts.resets(phase, other_peak)[0] == "FAIL"


def test_the_precision_check_reads_what_the_forward_did():
    proved = _cell("bf16", peak_bytes=1, precision_observed=[{"autocast": "bfloat16", "output": "bfloat16"}])
    assert verdicts.precision(0, _result(proved))[0] == "PASS"
    ran_fp32 = {**proved, "precision_observed": [{"autocast": "off", "output": "float32"}]}
    assert verdicts.precision(0, _result(ran_fp32))[0] == "FAIL"
    assert verdicts.precision(0, _result({**proved, "precision_observed": []}))[0] == "FAIL"
    assert verdicts.precision(3, _result(_cell("fp16", error="precision not proved: asked fp16")))[0] == "FAIL"


def test_the_partial_cap_is_a_fraction_of_the_gpus_memory_or_says_why_not():
    cells = [_cell(hidden=h, ga=g, peak_bytes=1, reserved_peak_bytes=r)
             for h, g, r in ((1024, 1, 100), (1024, 2, 200), (2048, 1, 600), (2048, 2, 800))]
    fraction, expected = verdicts.partial_cap(_result(*cells, device={"total_bytes": 1000}))
    assert fraction == pytest.approx(0.4) and expected == ["fp32.ga1.h2048", "fp32.ga2.h2048"]
    assert verdicts.partial_cap(_result(*cells, device={}))[0] is None   # never a byte count as a fraction
    overlap = [{**cells[1], "reserved_peak_bytes": 700}] + cells[2:]
    assert verdicts.partial_cap(_result(*overlap, device={"total_bytes": 1000}))[0] is None


def test_the_gpu_identity_check_needs_every_source_to_agree():
    facts = {"torch_device": {"name": "NVIDIA H200", "uuid": "GPU-1234"}, "nvml_name": "NVIDIA H200",
             "nvidia_smi_L": "GPU 0: NVIDIA H200 (UUID: GPU-1234)\n",
             "probe_device": {"name": "NVIDIA H200", "nvml": "device GPU-1234", "driver": "570.86.15"}}
    assert verdicts.gpu_identity(facts)[0] == "PASS"
    for broken in ({"nvml_name": "NVIDIA A100"}, {"nvidia_smi_L": "GPU 0: NVIDIA H200 (UUID: GPU-9999)\n"},
                   {"probe_device": {**facts["probe_device"], "nvml": "unavailable: no pynvml"}},
                   {"probe_device": {**facts["probe_device"], "driver": None}}, {"torch_device": {}}):
        assert verdicts.gpu_identity({**facts, **broken})[0] == "FAIL", broken


def test_the_overall_verdict():
    done = {"status": "done", "checks": [{"result": "PASS"}]}
    assert overall([done, done], "cuda") == "PASS"
    assert overall([done, {"status": "done", "checks": [{"result": "FAIL"}]}], "cuda") == "FAIL"
    assert overall([done, {"status": "skipped", "checks": [{"result": "SKIP"}]}], "cuda") == "INCOMPLETE"
    assert overall([done, None], "cuda") == "INCOMPLETE"
    assert overall([done, {"status": "done", "checks": [{"result": "SKIP"}]}], "cuda") == "INCOMPLETE"
    assert overall([done, {"status": "done", "checks": [{"result": "SKIP"}]}], "cpu").startswith("PASS (dry run")


# --- the runner: budget and timeouts ---------------------------------------------------------------
def _runner_copy(tmp_path):
    """The runner and two steps of its own: one that sleeps past its cap, one that passes."""
    bench = tmp_path / "gpu_first"
    shutil.copytree(BENCH, bench, ignore=shutil.ignore_patterns("__pycache__"))
    (bench / "sleepy.py").write_text("import sys, time\nsys.path.insert(0, __file__.rsplit('/', 1)[0])\n"
                                     "import gf\nstep = gf.Step('sleepy')\nstep.check('first', ('PASS', 'ok'))\n"
                                     "time.sleep(60)\n")
    (bench / "quick.py").write_text("import sys\nsys.path.insert(0, __file__.rsplit('/', 1)[0])\n"
                                    "import gf\nstep = gf.Step('quick')\nstep.check('it ran', ('PASS', 'ok'))\n"
                                    "sys.exit(step.done())\n")
    (bench / "run.sh").write_text("#!/bin/sh\nstep sleepy 1 2\nstep quick 1 10\n")
    return bench


def _step(bench, env, *args, script="gf.py"):
    return subprocess.run([sys.executable, str(bench / script), *args], env=env, capture_output=True,
                          text=True, timeout=60)


def test_a_step_past_its_timeout_fails_and_keeps_what_it_found_and_the_budget_skips_the_rest(tmp_path):
    bench, out = _runner_copy(tmp_path), tmp_path / "out"
    env = {**os.environ, "GF_OUT": str(out), "GF_DEV": "cpu", "GF_BUDGET": "100",
           "GF_START": str(int(__import__("time").time())), "GF_BUNDLE": str(tmp_path / "all.tgz")}
    _step(bench, env, "step", "sleepy", "1", "2")
    sleepy = json.loads((out / "sleepy.json").read_text())
    assert sleepy["status"] == "timeout" and [c["result"] for c in sleepy["checks"]] == ["PASS", "FAIL"]
    assert sleepy["checks"][1]["detail"] == "killed after 2 s (its timeout)"
    _step(bench, {**env, "GF_BUDGET": "1"}, "step", "quick", "1", "10")
    quick = json.loads((out / "quick.json").read_text())
    assert quick["status"] == "skipped" and quick["checks"][0]["result"] == "SKIP"
    assert "budget of 1 s is spent" in quick["checks"][0]["detail"]
    report = _step(bench, env, script="report.py")
    assert report.stdout.startswith("# bench/gpu_first: FAIL") and (out / "check.md").read_text() == report.stdout[:-1]
    with tarfile.open(tmp_path / "all.tgz") as tar:
        assert {"out/sleepy.json", "out/quick.json", "out/check.md"} <= set(tar.getnames())


# --- the dry run, end to end -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-first")
    env = {**os.environ, "OUT": str(out), "DEV": "cpu", "PYTHON": sys.executable}
    proc = subprocess.run([str(BENCH / "run.sh")], env=env, capture_output=True, text=True, timeout=1200)
    return out, proc


def _replayed(tmp_path, result_file: Path):
    """The host's parsing of a result a probe wrote: a probe that writes exactly that file, through
    run_probe (the subprocess, $BISECTOR_RESULT, validation, the failure classes)."""
    script = tmp_path / "replay.py"
    script.write_text(f"import os, shutil\nshutil.copy({str(result_file)!r}, os.environ['BISECTOR_RESULT'])\n"
                      f"raise SystemExit(3 if {json.loads(result_file.read_text()).get('metrics') == {} !r} else 0)\n")
    outcome = run_probe(ProbeSpec(path=script), Path(sys.executable), dict(os.environ))
    base = Measurement(key=result_file.stem, package="accelerate", candidate="0.22.0", env_fingerprint="e",
                       probe_fingerprint="p", repeat=0, status=Status.RUNNING, seconds=0.0)
    return base.model_copy(update={"status": outcome.status, "metrics": outcome.metrics, "details": outcome.details(),
                                   "reason": outcome.reason, "exit_code": outcome.exit_code})


class _Recorded:
    """The measuring seam over recorded measurements (the judge's only way to measure)."""

    exit_code_mode, probes_run, reused_keys = False, 0, set()

    def __init__(self, m):
        self.m = m

    def measure(self, c, repeat=0):
        return self.m


CAND = Candidate(package="accelerate", kind=CandidateKind.RELEASE, ref="0.22.0")


def _metric(result: dict) -> str:
    return next((k for k in sorted(result["metrics"]) if k.startswith("peak_bytes.")), "peak_bytes.fp32.ga1.h1024")


def _host_side(tmp_path, out: Path):
    """Every probe result of a run through parsing, the device check, the judge and the matrix."""
    facts = json.loads((out / "facts.json").read_text())["facts"]
    (tmp_path / "replay.py").write_text("")  # each result's own replay is written below
    listed = parse_gpu_list(facts.get("nvidia_smi_L") or "", facts.get("nvidia_smi_query") or "")
    measurer = Measurer(Store(tmp_path / "s.db"), EnvManager(tmp_path / "envs"), EnvSpec(name="plain"),
                        ProbeSpec(path=tmp_path / "replay.py"), gpus=GpuPool(listed[:1]))
    cell = Cell(slots=[Slot(label="0.22.0", version="0.22.0")])
    seen = {}
    for path in sorted((out / "results").glob("*.json")):
        if path.name == "meter.reference.json":
            continue
        result = json.loads(path.read_text())
        m = seen[path.stem] = measurer._same_device(_replayed(tmp_path, path))
        metric = _metric(result)
        if not result["metrics"]:  # nothing measured: the whole OOM
            assert m.status is Status.OOM and m.reason.startswith("probe error: no cell could be measured")
            crit = Criterion(metric=metric, threshold=1.0)
            assert judge(_Recorded(m), calibrate(crit), CAND).verdict is Verdict.BAD  # oom_is_bad
            ok = BaselineCell(versions={"accelerate": "0.21.0"}, status="ok", metrics={metric: 1.0})
            assert compare(summarise(cell, ["accelerate"], [m], crit), ok, crit, False).verdict is CellVerdict.REGRESSION
            continue
        assert m.status is Status.OK and m.metrics == result["metrics"], (path.name, m.reason)
        value, partial = m.metrics[metric], bool(result.get("oom_cells"))
        for threshold, verdict in ((value * 2, Verdict.BAD if partial else Verdict.GOOD), (value / 2, Verdict.BAD)):
            crit = Criterion(metric=metric, threshold=threshold)
            assert judge(_Recorded(m), calibrate(crit), CAND).verdict is verdict, (path.name, threshold)
        crit = Criterion(metric=metric, max_increase="10%")
        for before, verdict in ((value, CellVerdict.SAME), (value / 2, CellVerdict.REGRESSION)):
            base = BaselineCell(versions={"accelerate": "0.21.0"}, status="ok", metrics={metric: before})
            assert compare(summarise(cell, ["accelerate"], [m], crit), base, crit, False).verdict is verdict
    return {k: m.status for k, m in seen.items()}, listed


@pytest.mark.skipif(not (FIXTURES / "facts.json").exists(),
                    reason="no GPU run recorded yet: tests/fixtures/gpu_first/ is filled from the first real run")
def test_the_host_reads_what_the_first_gpu_run_brought_back(tmp_path):
    """Recorded fixtures of a real GPU run of bench/gpu_first (see tests/fixtures/gpu_first/README.md)."""
    seen, listed = _host_side(tmp_path, FIXTURES)
    device = json.loads((FIXTURES / "results" / "meter.probe.json").read_text())["device"]
    assert listed and listed[0].name == device["name"]   # the host names the GPU as the probe's torch does
    assert seen["meter.probe"] is Status.OK and seen.get("oom.whole") is Status.OOM
