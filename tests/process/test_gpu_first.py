"""acceptance/gpu_first: the dry run (``DEV=cpu``) end to end, the runner's budget and timeouts, every
check able to fail, and the host side over what a run brings back (item 2 of issue 29).

What a GPU run brings back is fed through the host's parsing (the probe-result replayed through
``run_probe``), the device check of the measurer, the judge and the matrix: here the dry run's
results, and the recorded fixtures of a real GPU run in ``tests/fixtures/gpu_first/`` (none yet:
no GPU was lent to the session that wrote this; ``docs/gpu.md`` says how to record them).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from bisector.decide.judge import judge
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.criterion import Criterion, calibrate
from bisector.core.measurement import Measurement, Status
from bisector.core.verdict import Verdict
from bisector.envs import EnvManager, EnvSpec
from bisector.matrix.cells import Cell, Slot
from bisector.matrix.compare import compare, summarise
from bisector.matrix.grid_result import BaselineCell, CellVerdict
from bisector.measure.gpus import GpuPool, parse_gpu_list
from bisector.measure.executors import LocalExecutor
from bisector.measure.measurer import Measurer
from bisector.measure.probe_process import run_probe
from bisector.job.probe import ScriptProbe
from bisector.store.storage import Store

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "acceptance" / "gpu_first"
FIXTURES = ROOT / "tests" / "fixtures" / "gpu_first"
sys.path.insert(0, str(BENCH))

import gf  # noqa: E402
import verdicts  # noqa: E402
import verdicts_device  # noqa: E402
from report import verdict as overall  # noqa: E402

GPU_SECONDS = 420        # the planned steps (issue 36); the device's one command is 600 s
DEVICE_COMMAND_S = 600


def _step_module(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"gpu_first_step_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _device_command():
    """The one line docs/gpu.md gives for the device (the one the dry run runs)."""
    lines = [ln.split("#", 1)[0].strip() for ln in (ROOT / "docs" / "gpu.md").read_text().splitlines()]
    return next(ln for ln in lines if ln.startswith("bash acceptance/gpu_first/run.sh"))


# --- the plan ------------------------------------------------------------------------------------
def test_every_step_has_its_file_and_the_plan_fits_the_device_command():
    steps = gf.planned_steps()
    assert [s[0] for s in steps] == ["facts", "meter", "invariants", "resets", "precision", "oom", "seed", "allocator",
                                     "command"]
    assert all((BENCH / f"{name}.py").is_file() for name, _, _ in steps)
    assert sum(planned for _, planned, _ in steps) <= GPU_SECONDS
    budget = float(next(w for w in (BENCH / "run.sh").read_text().split() if w.startswith("GF_BUDGET=")).split(":-")[1]
                   .rstrip("}"))
    assert sum(planned for _, planned, _ in steps) < budget < DEVICE_COMMAND_S - 60   # the report and start inside
    for name, planned, cap in steps:  # each step's docstring states the plan the runner holds
        assert f"planned {planned:g} s on a GPU" in (BENCH / f"{name}.py").read_text()
        # every inner timeout, one after the other, and the step's reserve fit inside its cap
        timeouts = _step_module(name).TIMEOUTS
        assert planned < sum(timeouts.values()) <= cap - gf.reserve_s(cap), (name, timeouts, cap)
    assert _step_module("invariants").CELL_TIMEOUT_S < _step_module("invariants").TIMEOUTS["isolated"]


# --- every check can fail -----------------------------------------------------------------------
def _cell(prec="fp32", ga=1, hidden=1024, **kw):
    return {"precision": prec, "ga": ga, "hidden": hidden, "n_params": 1000, **kw}


def _result(*cells, **kw):
    return {"cells": list(cells), **kw}


GOOD_CUDA = _cell(peak_bytes=100, requested_peak_bytes=90, reserved_peak_bytes=120,
                  nvml_device_used_at_marks_max_bytes=500)
ON_CUDA = {"device": "NVIDIA H200", "cuda_skipped": None, "cells": [{"cuda": {"device_type": "cuda", "meter": "cuda"}}]}


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
    (verdicts.same_peaks(_result(_cell(peak_bytes=100)), _result(_cell(ga=2, peak_bytes=100)), "x"), "FAIL"),
    (verdicts.whole_oom(3, _result(_cell(error="OOM"), oom_cells=["fp32.ga1.h1024"])), "PASS"),
    (verdicts.whole_oom(0, _result(_cell(error="OOM"), oom_cells=["fp32.ga1.h1024"])), "FAIL"),
    (verdicts.whole_oom(3, _result(_cell(error="OOM"), _cell(ga=2, error="x"), oom_cells=["fp32.ga1.h1024"])), "FAIL"),
    (verdicts.partial_oom(0, _result(_cell(peak_bytes=1), _cell(hidden=2048, error="OOM"),
                                     oom_cells=["fp32.ga1.h2048"]), ["fp32.ga1.h2048"]), "PASS"),
    (verdicts.partial_oom(0, _result(_cell(error="OOM"), _cell(hidden=2048, error="OOM"),
                                     oom_cells=["fp32.ga1.h1024", "fp32.ga1.h2048"]), ["fp32.ga1.h2048"]), "FAIL"),
    (verdicts.partial_oom(3, _result(_cell(hidden=2048, error="OOM"), oom_cells=["fp32.ga1.h2048"]),
                          ["fp32.ga1.h2048"]), "FAIL"),
    (verdicts.seed_fp32({"bf16": {"allocated": 1.6}, "fp32": {"allocated": 0.29}}, 0.49), "PASS"),
    (verdicts.seed_fp32({"bf16": {"allocated": 2.9}, "fp32": {"allocated": 0.55}}, 0.49), "FAIL"),
    (verdicts.seed_fp32({"bf16": {"allocated": 1.6}, "fp32": {"allocated": 0.29}}, None), "FAIL"),
    (verdicts.seed_fp32({"bf16": {"allocated": 1.6}}, 0.49), "FAIL"),
    (verdicts_device.on_cuda(_result(_cell(peak_bytes=1, meter="cuda"), meter="cuda", device={"type": "cuda"})),
     "PASS"),
    (verdicts_device.on_cuda(_result(_cell(peak_bytes=1, meter="cpu-dispatch"), meter="cpu-dispatch",
                                     device={"type": "cuda"})), "FAIL"),
    (verdicts_device.on_cuda(_result(_cell(peak_bytes=1, meter="cuda"), meter="cuda", device={"type": "cpu"})), "FAIL"),
    (verdicts_device.on_cuda(_result(_cell(peak_bytes=1, meter="cpu-dispatch"), meter="cuda",
                                     device={"type": "cuda"})), "FAIL"),
    (verdicts_device.on_cuda(None), "FAIL"),
    (verdicts_device.on_cuda(None, verdicts.NOT_STARTED), "INCOMPLETE"),
    (verdicts_device.reference_on_cuda({"device": {"type": "cuda", "name": "H200"}, "meters": {"a": "cuda"}}), "PASS"),
    (verdicts_device.reference_on_cuda({"device": {"type": "cpu", "name": None}, "meters": {"a": "cuda"}}), "FAIL"),
    (verdicts_device.reference_on_cuda({"device": {"type": "cuda", "name": "H200"}, "meters": {"a": "cpu-dispatch"}}),
     "FAIL"),
    (verdicts_device.reference_on_cuda(None), "FAIL"),
    (verdicts_device.allocator_on_cuda(ON_CUDA), "PASS"),
    (verdicts_device.allocator_on_cuda({**ON_CUDA, "cuda_skipped": "torch 2.11 sees no CUDA device"}), "FAIL"),
    (verdicts_device.allocator_on_cuda({**ON_CUDA, "cells": [{"cuda": {"device_type": "cpu", "meter": "cuda"}}]}),
     "FAIL"),
    (verdicts_device.allocator_on_cuda({**ON_CUDA, "cells": [{"cuda": {"error": "cell timed out after 180s"}}]}),
     "FAIL"),
    (verdicts_device.allocator_on_cuda({**ON_CUDA, "cells": []}), "FAIL"),
])
def test_each_check_passes_only_on_what_it_claims(verdict, expected):
    assert verdict[0] == expected, verdict


def _phases(*peaks):
    return {f"p{i}": {"peak_bytes": p} for i, p in enumerate(peaks)}


CUT, UNSTARTED = verdicts.INNER_TIMEOUT, verdicts.NOT_STARTED
PARTIAL = {"partial": {"done": 1, "planned": 2}}
TWO = _result(_cell(peak_bytes=100), _cell(ga=2, peak_bytes=200))


@pytest.mark.parametrize("verdict, expected", [
    # a command cut by the step's deadline: INCOMPLETE, what finished kept and still judged
    (verdicts.all_measured(CUT, _result(_cell(peak_bytes=1), **PARTIAL)), "INCOMPLETE"),
    (verdicts.all_measured(UNSTARTED, None), "INCOMPLETE"),
    (verdicts.all_measured(CUT, _result(_cell(peak_bytes=1), _cell(ga=2, error="RuntimeError: x"), **PARTIAL)),
     "FAIL"),
    (verdicts.precision(CUT, _result(_cell("bf16", peak_bytes=1, precision_observed=[
        {"autocast": "bfloat16", "output": "bfloat16"}]), **PARTIAL)), "INCOMPLETE"),
    (verdicts.precision(CUT, _result(_cell("bf16", peak_bytes=1, precision_observed=[
        {"autocast": "off", "output": "float32"}]), **PARTIAL)), "FAIL"),
    (verdicts.meter_vs_reference(_result(_cell(peak_bytes=1000), **PARTIAL), {"cells": {"fp32.ga1.h1024": 1000}},
                                 code=CUT), "INCOMPLETE"),
    (verdicts.meter_vs_reference(_result(_cell(peak_bytes=1000)), None, ref_code=UNSTARTED), "INCOMPLETE"),
    (verdicts.meter_vs_reference(_result(_cell(peak_bytes=1000), **PARTIAL), {"cells": {"fp32.ga1.h1024": 1500}},
                                 code=CUT), "FAIL"),
    (verdicts.invariants(_result(GOOD_CUDA, **PARTIAL), CUT), "INCOMPLETE"),
    (verdicts.invariants(_result({**GOOD_CUDA, "reserved_peak_bytes": 99}, **PARTIAL), CUT), "FAIL"),
    (verdicts.whole_oom(CUT, None), "INCOMPLETE"),
    (verdicts.partial_oom(CUT, _result(_cell(peak_bytes=1), **PARTIAL), ["fp32.ga1.h2048"]), "INCOMPLETE"),
    (verdicts.partial_oom(CUT, _result(_cell(hidden=2048, peak_bytes=1), **PARTIAL), ["fp32.ga1.h2048"]), "FAIL"),
    (verdicts.same_peaks(TWO, None, "x", CUT), "INCOMPLETE"),
    # a check reading another step's partial or absent result: SKIP with the reason, never FAIL
    (verdicts.same_peaks(TWO, None, "x"), "SKIP"),
    (verdicts.same_peaks(TWO, _result(_cell(peak_bytes=100), **PARTIAL), "x"), "SKIP"),
    (verdicts.same_peaks(TWO, {"metrics": {}, "error": "CUDA was asked for (--device cuda) but ..."}, "x"), "SKIP"),
    (verdicts.same_peaks(_result(_cell(peak_bytes=100)), _result(_cell(peak_bytes=100), **PARTIAL), "x"), "PASS"),
    (verdicts.same_peaks(TWO, _result(_cell(peak_bytes=150), **PARTIAL), "x"), "FAIL"),    # what both have differs
    (verdicts.resets(None, _result(_cell(peak_bytes=30, cuda_reset="window", phases=_phases(30, 30)))), "SKIP"),
    (verdicts.resets(_result(_cell(peak_bytes=30, cuda_reset="phase", phases=_phases(30, 10)), **PARTIAL),
                     _result(_cell(peak_bytes=30, cuda_reset="window", phases=_phases(30, 30)),
                             _cell(ga=2, peak_bytes=30, cuda_reset="window", phases=_phases(30, 30)))), "SKIP"),
    (verdicts.resets(_result(_cell(peak_bytes=30, cuda_reset="phase", phases=_phases(30, 10))),
                     _result(_cell(peak_bytes=30, cuda_reset="window", phases=_phases(30, 30)), **PARTIAL), CUT),
     "INCOMPLETE"),
])
def test_running_out_of_time_is_incomplete_and_another_steps_gap_a_skip(verdict, expected):
    assert verdict[0] == expected, verdict
    assert verdict[1], verdict      # each says why


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
    fraction, expected, gap = verdicts.partial_cap(_result(*cells, device={"total_bytes": 1000}))
    assert fraction == pytest.approx(0.4) and expected == ["fp32.ga1.h2048", "fp32.ga2.h2048"]
    assert gap == {"smaller_width_max_reserved": 200, "larger_width_min_reserved": 600, "margin_each_side": 200}
    assert verdicts.partial_cap(_result(*cells, device={}))[0] is None   # never a byte count as a fraction
    overlap = [{**cells[1], "reserved_peak_bytes": 700}] + cells[2:]
    assert verdicts.partial_cap(_result(*overlap, device={"total_bytes": 1000}))[0] is None


def test_the_gpu_identity_check_needs_every_source_to_agree():
    mib = 143771
    torch_dev = {"name": "NVIDIA H200", "uuid": "GPU-1234", "count": 1, "total_bytes": (mib - 500) << 20}
    facts = {"torch_device": torch_dev, "nvml_name": "NVIDIA H200",
             "nvidia_smi_L": "GPU 0: NVIDIA H200 (UUID: GPU-1234)\n",
             "nvidia_smi_query": f"GPU-1234, {mib}, 570.86.15\n",
             "probe_device": {"name": "NVIDIA H200", "nvml": "device GPU-1234", "driver": "570.86.15"}}
    assert verdicts_device.gpu_identity(facts)[0] == "PASS"
    for broken in ({"nvml_name": "NVIDIA A100"}, {"nvidia_smi_L": "GPU 0: NVIDIA H200 (UUID: GPU-9999)\n"},
                   {"probe_device": {**facts["probe_device"], "nvml": "unavailable: no pynvml"}},
                   {"probe_device": {**facts["probe_device"], "driver": None}}, {"torch_device": {}},
                   {"probe_device": {**facts["probe_device"], "driver": "550.1"}},          # not nvidia-smi's driver
                   {"torch_device": {**torch_dev, "count": 2}},                               # two visible
                   {"torch_device": {**torch_dev, "total_bytes": 81559 << 20}},               # an 80 GB card's memory
                   {"torch_device": {**torch_dev, "total_bytes": (mib + 2) << 20}},           # more than the board
                   {"nvidia_smi_query": "GPU-9999, 143771, 570.86.15\n"}, {"nvidia_smi_query": None}):
        assert verdicts_device.gpu_identity({**facts, **broken})[0] == "FAIL", broken


def test_the_fp32_bound_is_the_embeddings_own_bytes_per_parameter_plus_the_margin():
    pythia = _result(_cell(hidden=2048, peak_bytes=1, n_params=1_414_647_808), probe={"config": {"vocab": 50304}})
    bound, floor = verdicts.fp32_bound(pythia)
    assert floor == pytest.approx(0.2913, abs=1e-4) and bound == pytest.approx(floor + verdicts.FP32_MARGIN)
    # the CPU's fp32 GA cost (0.294) passes with a margin; a 16-bit copy of every parameter (2 B/param) never
    assert verdicts.seed_fp32({"bf16": {"allocated": 1.858}, "fp32": {"allocated": 0.294}}, bound)[0] == "PASS"
    assert verdicts.seed_fp32({"bf16": {"allocated": 3.858}, "fp32": {"allocated": 0.294 + 2}}, bound)[0] == "FAIL"
    assert bound - 0.294 >= 10 * 0.012e9 / 1_414_647_808    # ten times the 12 MB that 0.3 left
    assert verdicts.fp32_bound(_result(_cell(peak_bytes=1)))[0] is None      # no vocabulary in the result


def test_bf16_over_fp32_is_a_finding_reported_never_a_failure():
    """The seed's own NVML numbers (0.86 - 0.29 = 0.57) are below the CPU's 1.0: a finding, not a fault."""
    seed = {"bf16": {"allocated": 0.86}, "fp32": {"allocated": 0.29}}
    assert verdicts.seed_bf16_excess(seed) == ("FINDING", "bf16 0.860 - fp32 0.290 = 0.570 B/param (below what the "
                                                          "CPU finds: the GPU does not keep the copies: >= 1.0 there)")
    cpu = {"bf16": {"allocated": 1.858}, "fp32": {"allocated": 0.294}}
    assert verdicts.seed_bf16_excess(cpu)[0] == "FINDING" and "as on the CPU" in verdicts.seed_bf16_excess(cpu)[1]
    assert verdicts.seed_bf16_excess({})[0] == "FINDING"
    assert overall([{"status": "done", "checks": [{"result": "FINDING"}, {"result": "PASS"}]}], "cuda") == "PASS"


def test_the_overall_verdict():
    done = {"status": "done", "checks": [{"result": "PASS"}]}
    assert overall([done, done], "cuda") == "PASS"
    assert overall([done, {"status": "done", "checks": [{"result": "FAIL"}]}], "cuda") == "FAIL"
    assert overall([done, {"status": "skipped", "checks": [{"result": "SKIP"}]}], "cuda") == "INCOMPLETE"
    assert overall([done, None], "cuda") == "INCOMPLETE"
    assert overall([done, {"status": "done", "checks": [{"result": "SKIP"}]}], "cuda") == "INCOMPLETE"
    assert overall([done, {"status": "done", "checks": [{"result": "SKIP"}]}], "cpu").startswith("PASS (dry run")


# --- the runner: a step takes all its processes with it; budget and timeouts -------------------------
CHILD = """import os, subprocess, sys, time
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", sys.argv[1]])  # its group; marked
if sys.argv[2:] == ["daemon"] and os.fork() == 0:               # a daemon: a session of its own, orphaned
    os.setsid()
    if os.fork() == 0:
        time.sleep(300)
    os._exit(0)
time.sleep(0.5)
with open(sys.argv[1] + ".tmp", "w") as fh:
    fh.write(f"{os.getpid()} {sleeper.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)
"""
STEP = "import os, subprocess, sys, time\nsys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\nimport gf\n"
PLANTED = {
    # outlives its cap: starts a probe-like child as gf.run does (a group of its own) and sleeps on
    "orphan": STEP + "step = gf.Step('orphan')\nstep.check('facts.stack', ('PASS', 'ok'))\n"
                     "subprocess.Popen([sys.executable, os.environ['CHILD'], os.environ['PIDS'] + '.orphan',"
                     " 'daemon'], process_group=0)\ntime.sleep(300)\n",
    # asks for more than its cap: gf.run cuts the timeout to the step's deadline, and the step records it
    "inner": STEP + "step = gf.Step('inner')\ncode = step.run('child', [sys.executable, os.environ['CHILD'], "
                    "os.environ['PIDS'] + '.inner'], dict(os.environ), 300)\n"
                    "step.check('meter.measured', ('PASS' if code == gf.INNER_TIMEOUT else 'FAIL',"
                    " code), label='child')\nsys.exit(step.done())\n",
    "quick": STEP + "step = gf.Step('quick')\nstep.check('facts.stack', ('PASS', 'ok'))\nsys.exit(step.done())\n",
}


def _runner_copy(tmp_path, steps):
    """The runner (the real run.sh with its step lines replaced) and the planted steps beside it."""
    bench = tmp_path / "gpu_first"
    shutil.copytree(BENCH, bench, ignore=shutil.ignore_patterns("__pycache__"))
    for name, source in PLANTED.items():
        (bench / f"{name}.py").write_text(source)
    head = [ln for ln in (BENCH / "run.sh").read_text().splitlines() if not ln.startswith("step ")]
    at = head.index(next(ln for ln in head if ln.startswith('"$PY" "$HERE/report.py"')))
    (bench / "run.sh").write_text("\n".join(head[:at] + [f"step {s}" for s in steps] + head[at:]) + "\n")
    (tmp_path / "child.py").write_text(CHILD)
    return bench


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _daemons(marker: str) -> list:
    """Processes whose command line holds ``marker`` (a path under the test's tmp_path)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmd = Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if marker in cmd and _alive(int(name)):
                found.append(int(name))
    return found


def test_a_step_takes_all_its_processes_with_it_and_only_it_is_incomplete(tmp_path):
    """A planted step outlives its cap with a probe-like child in a group of its own, a grandchild and
    a setsid daemon; another asks gf.run for more than its cap (its child and grandchild end at the
    step's deadline, the step records it). Nothing of either is left afterwards;
    the first is INCOMPLETE (its finished check kept), the others done; two files come back."""
    bench = _runner_copy(tmp_path, ["orphan 1 2", "inner 1 2", "quick 1 10"])
    out, work, pids = tmp_path / "out", tmp_path / "work", str(tmp_path / "pids")
    env = {**os.environ, "OUT": str(out), "WORK": str(work), "DEV": "cpu", "PYTHON": sys.executable,
           "CHILD": str(tmp_path / "child.py"), "PIDS": pids}
    try:   # whatever fails, nothing planted outlives the test (each carries a path under tmp_path)
        proc = subprocess.run(["bash", str(bench / "run.sh")], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        for which in ("orphan", "inner"):   # the child and its sleeper, written once both ran
            started = [int(p) for p in Path(f"{pids}.{which}").read_text().split()]
            assert len(started) == 2 and not [p for p in started if _alive(p)], which
        assert not _daemons(str(tmp_path))   # the setsid daemons, the sleepers, the steps: none left
    finally:   # each planted process, the runner and the steps carry tmp_path in their command lines
        for pid in _daemons(str(tmp_path)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
    orphan = json.loads((work / "orphan.json").read_text())
    assert orphan["status"] == "timeout" and [c["result"] for c in orphan["checks"]] == ["PASS", "INCOMPLETE"]
    assert orphan["checks"][1]["detail"].startswith("ran out of time: killed after 2 s")
    assert orphan["leftover_processes"] >= 3    # the step, its child, the sleeper (the daemon came back to the runner)
    inner = json.loads((work / "inner.json").read_text())
    assert inner["status"] == "done" and inner["facts"]["commands"]["child"]["exit"] == verdicts.said(gf.INNER_TIMEOUT)
    assert [c["result"] for c in inner["checks"]] == ["PASS"] and inner["leftover_processes"] == 0
    check = (out / "check.md").read_text()
    assert check.startswith("# acceptance/gpu_first: INCOMPLETE") and check == (work / "check.md").read_text()
    rows = {ln.split("|")[1].strip(): ln.split("|")[4].strip() for ln in check.splitlines()
            if ln.startswith("| ") and ln.split("|")[1].strip() in PLANTED}
    assert rows == {"orphan": "INCOMPLETE (ran out of time)", "inner": "done", "quick": "done"}
    assert sorted(os.listdir(out)) == ["check.md", gf.BUNDLE_NAME]
    with tarfile.open(out / gf.BUNDLE_NAME) as tar:
        names = set(tar.getnames())
    assert {f"gpu-first/{p.relative_to(work)}" for p in work.rglob("*") if p.is_file()} <= names


def test_the_budget_skips_a_step_and_says_so(tmp_path):
    bench, out = _runner_copy(tmp_path, ["quick 1 10"]), tmp_path / "out"
    env = {**os.environ, "GF_OUT": str(out), "GF_DEV": "cpu", "GF_BUDGET": "1", "GF_START": str(int(time.time()) - 5)}
    subprocess.run([sys.executable, str(bench / "gf.py"), "step", "quick", "1", "10"], env=env, check=True, timeout=60,
                   capture_output=True)
    quick = json.loads((out / "quick.json").read_text())
    assert quick["status"] == "skipped" and quick["checks"][0]["result"] == "SKIP"
    assert "budget of 1 s is spent" in quick["checks"][0]["detail"]


# --- the dry run, end to end -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """docs/gpu.md's device command, as is, with DEV=cpu: OUT gets what the device would bring back;
    the work directory (under TMPDIR) is unpacked from the bundle, as a host does after a GPU run."""
    base = tmp_path_factory.mktemp("gpu-first")
    out, tmp = base / "out", base / "tmp"
    tmp.mkdir()
    env = {**os.environ, "OUT": str(out), "DEV": "cpu", "PYTHON": sys.executable, "TMPDIR": str(tmp)}
    proc = subprocess.run(["bash", "-c", _device_command()], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1200)
    returned = sorted(os.listdir(out))
    with tarfile.open(out / gf.BUNDLE_NAME) as tar:
        tar.extractall(base / "unpacked")
    work = base / "unpacked" / "gpu-first"
    assert returned == ["check.md", gf.BUNDLE_NAME]
    assert (work / "check.md").read_text() == (out / "check.md").read_text()
    return work, proc


def _replayed(tmp_path, result_file: Path):
    """The host's parsing of a result a probe wrote: a probe that writes exactly that file, through
    run_probe (the subprocess, $BISECTOR_RESULT, validation, the failure classes)."""
    script = tmp_path / "replay.py"
    script.write_text(f"import os, shutil\nshutil.copy({str(result_file)!r}, os.environ['BISECTOR_RESULT'])\n"
                      f"raise SystemExit(3 if {json.loads(result_file.read_text()).get('metrics') == {} !r} else 0)\n")
    outcome = run_probe(ScriptProbe(path=script), Path(sys.executable), dict(os.environ))
    base = Measurement(key=result_file.stem, package="accelerate", candidate="0.22.0", env_fingerprint="e",
                       probe_fingerprint="p", repeat=0, status=Status.RUNNING, seconds=0.0)
    return base.model_copy(update={"status": outcome.status, "metrics": outcome.metrics, "details": outcome.details(),
                                   "result": outcome.result, "reason": outcome.reason, "exit_code": outcome.exit_code})


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
    envs = EnvManager(tmp_path / "envs")
    measurer = Measurer(Store(tmp_path / "s.db"), envs, EnvSpec(name="plain"), ScriptProbe(path=tmp_path / "replay.py"),
                        LocalExecutor(envs, GpuPool(listed[:1])))
    cell = Cell(slots=[Slot(label="0.22.0", version="0.22.0")])
    seen = {}
    for path in sorted((out / "results").glob("*.json")):
        if path.name.endswith("reference.json"):
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
    """Recorded fixtures of a real GPU run of acceptance/gpu_first (see tests/fixtures/gpu_first/README.md)."""
    seen, listed = _host_side(tmp_path, FIXTURES)
    device = json.loads((FIXTURES / "results" / "meter.probe.json").read_text())["device"]
    assert listed and listed[0].name == device["name"]   # the host names the GPU as the probe's torch does
    assert seen["meter.probe"] is Status.OK and seen.get("oom.whole") is Status.OOM


# --- the probe keeps every finished cell ---------------------------------------------------------------
def test_a_killed_probe_keeps_its_finished_cells_in_a_result_the_host_reads(tmp_path):
    """The real probe, its second cell's model factory killing the probe's whole process group
    (SIGKILL: nothing runs after it): the result file holds the first cell, as a partial result."""
    from tests.support.tinylm import tiny_lm_source

    (tmp_path / "killer.py").write_text(tiny_lm_source() + (
        "\nimport os, signal, time\n_build = build\n\n\ndef build(hidden, **kw):\n    if hidden == 48:\n"
        "        for _ in range(600):  # the first cell's partial result written, then the kill\n"
        "            if os.path.exists(os.environ['BISECTOR_RESULT']):\n                break\n"
        "            time.sleep(0.1)\n"
        "        os.killpg(os.getpgid(0), signal.SIGKILL)\n    return _build(hidden, **kw)\n"))
    out = tmp_path / "result.json"
    env = {**os.environ, "BISECTOR_RESULT": str(out), "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, gf.PROBE, "--device", "cpu", "--model-factory", "killer:build", "--sizes",
                           "32,48", "--precisions", "fp32", "--ga", "1", "--workers", "1"], env=env,
                          capture_output=True, text=True, timeout=120, start_new_session=True)
    assert proc.returncode == -9, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["partial"] == {"done": 1, "planned": 2} and result["metrics"] == {}
    assert [(c["hidden"], c["peak_bytes"] > 0) for c in result["cells"]] == [(32, True)]
    assert result["meter"] == "cpu-dispatch" and result["device"]["type"] == "cpu"
    replayed = _replayed(tmp_path, out)       # the host: a crash that says why, never a number
    assert replayed.status is Status.CRASHED and "did not finish: 1 of 2 cells" in replayed.reason


def test_the_probe_refuses_cuda_with_more_than_one_visible_gpu(monkeypatch):
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("ga_memory_main_for_test", gf.PROBE)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    why = probe._cuda_problem({"device": "cuda", "device_requested": "cuda"})
    assert why == ("2 GPUs are visible (CUDA_VISIBLE_DEVICES=0,1): the probe measures one; set CUDA_VISIBLE_DEVICES "
                   "to one GPU")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert probe._cuda_problem({"device": "cuda", "device_requested": "cuda"}) is None
