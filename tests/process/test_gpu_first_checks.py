"""acceptance/gpu_first (issue 36): every check listed once with the condition it fails on and its margin
(checklist.py, docs/gpu.md's table as printed), the plan as one true number, no import cycle, a WARN
line for a refused subreaper, the command step's script reading the command meter's own window (under
the real meter, on the CPU), and results written as they go (reference.py, the seed's table)."""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "acceptance" / "gpu_first"
sys.path.insert(0, str(BENCH))

import allocator_model  # noqa: E402
import checklist  # noqa: E402
import gf  # noqa: E402
import report  # noqa: E402
import verdicts  # noqa: E402
import verdicts_device as vd  # noqa: E402

COMMAND_METER = ROOT / "probes" / "command" / "__main__.py"


def _module(name):
    spec = importlib.util.spec_from_file_location(f"gpu_first_{name}_for_test", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- every check listed, in the docs as printed ------------------------------------------------------
def _ids_in_code() -> set:
    """The check ids the steps and the runner record (string literals at check/cuda_only/record calls),
    and the allocator model's own checks (the allocator step records each as ``allocator.<name>``)."""
    found = set()
    for path in BENCH.glob("*.py"):
        if path.name != "checklist.py":
            found |= set(re.findall(r"(?:check|cuda_only|record)\(\s*\"([a-z_]+\.[a-z_0-9]+)\"", path.read_text()))
    return found | {f"allocator.{c['name']}" for c in allocator_model.checks([], "no CUDA")}


def test_every_check_the_code_records_is_listed_and_every_listed_one_is_recorded():
    ids = [c.id for c in checklist.CHECKS]
    assert len(ids) == len(set(ids))
    assert _ids_in_code() == set(ids)
    assert all(c.fails and c.margin and c.name for c in checklist.CHECKS)
    with pytest.raises(KeyError):     # a step cannot record a check that is not listed
        checklist.record("meter.no_such_check", "PASS", "x")


def test_docs_hold_the_check_table_as_printed():
    """docs/gpu.md's check table is checklist.py's output, so it lists every check with the condition
    it fails on and its margin, and cannot drift from the code."""
    printed = subprocess.run([sys.executable, str(BENCH / "checklist.py")], capture_output=True, text=True,
                             check=True).stdout
    assert printed == checklist.table() and printed in (ROOT / "docs" / "gpu.md").read_text()
    for needed in ("facts.stack", "allocator.precision_proved", "allocator.ran", "allocator.finished",
                   "meter.measured", "invariants.measured", "resets.measured", "seed.measured", "command.vs_script",
                   "oom.partial"):
        assert f"| `{needed}` |" in printed


def test_the_plan_is_one_number_at_most_420_s():
    total = sum(planned for _, planned, _ in gf.planned_steps())
    assert total <= 420
    assert f"add up to {total:g};" in (BENCH / "run.sh").read_text()
    docs = (ROOT / "docs" / "gpu.md").read_text()
    assert f"| **all** | **{total:g} s** |" in docs
    claims = re.findall(r"(?:[Pp]lan(?:ned)?(?: total)?(?: is)?|add up to|GPU time)[: ]+(\d{3}) s", docs)
    assert {float(x) for x in claims} <= {total}, claims     # no other total anywhere in the page
    allocator = next(planned for name, planned, _ in gf.planned_steps() if name == "allocator")
    assert allocator >= 60 + 10   # its CPU half alone took 59.9 s on a loaded machine: a plan with a margin


def test_bench_gpu_first_has_no_import_cycle():
    """Each module's imports of its siblings (any depth in the module, not only the top) form no cycle."""
    names = {p.stem for p in BENCH.glob("*.py")}
    graph = {}
    for path in BENCH.glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        graph[path.stem] = (imported & names) - {path.stem}

    def reaches(start, goal, seen=()):
        return any(nxt == goal or (nxt not in seen and reaches(nxt, goal, (*seen, nxt))) for nxt in graph[start])

    assert not [m for m in graph if reaches(m, m)], graph
    assert "gf" not in graph["report"] and "report" in graph["gf"]


# --- a kernel that refuses the subreaper: said, not silent ------------------------------------------
class _RefusingLibc:
    """libc whose prctl fails as gVisor's does (errno is read through ctypes, left at 0 here)."""

    def prctl(self, *args):
        return -1


def test_a_refused_subreaper_is_a_warn_line_in_check_md(tmp_path, monkeypatch):
    assert gf.become_subreaper() is None                 # this kernel allows it
    why = gf.become_subreaper(_RefusingLibc())
    assert why.startswith("prctl(PR_SET_CHILD_SUBREAPER) failed")
    monkeypatch.setenv("GF_OUT", str(tmp_path))
    name = gf.planned_steps()[0][0]
    step = {"step": name, "dev": "cpu", "status": "done", "checks": [checklist.record("facts.stack", "PASS", "ok")],
            "tables": {}, "facts": {}, "warnings": [checklist.record("run.subreaper", "WARN", why)]}
    (tmp_path / f"{name}.json").write_text(json.dumps(step))
    text = report.markdown(str(tmp_path))
    assert f"\nWARN: {why}: an orphan that left a step's session" in text
    assert not text.startswith("# acceptance/gpu_first: FAIL")      # a WARN fails nothing


# --- the command step: the script reads the meter's own window ---------------------------------------
def _run_script(tmp_path, source):
    """The command step's script under the real command meter, on the CPU; (meter result, script's own)."""
    script, own, result = tmp_path / "loop.py", tmp_path / "own.json", tmp_path / "result.json"
    script.write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(COMMAND_METER), "--", sys.executable, str(script), str(own), "cpu"],
                          env={**env, "BISECTOR_RESULT": str(result), "BISECTOR_DEVICE": "cpu"}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(result.read_text()), json.loads(own.read_text())


def test_the_command_scripts_hook_reads_in_the_meters_window_under_the_real_meter(tmp_path):
    """Per-optimizer post hooks run before torch's global ones (the meter's read and reset): at step i
    the meter has recorded i steps. A script reading after the meter (a global hook registered after
    it, like the old read after opt.step(); opt.zero_grad()) is caught by the same check."""
    command = _module("command")
    result, own = _run_script(tmp_path, command.SCRIPT.format(steps=command.STEPS))
    assert vd.command_ran(0, result, command.STEPS)[0] == "PASS"
    assert own["meter_steps_seen"] == [0, 1, 2, 3] and vd.command_window(own, command.STEPS)[0] == "PASS"
    assert own["device"] == own["param_device"] == "cpu" and own["peaks"] == []
    assert vd.command_cpu_meter(result)[0] == "PASS"
    late = command.SCRIPT.replace("opt.register_step_post_hook(at_step_end)",
                                  "sys.modules['torch.optim.optimizer'].register_optimizer_step_post_hook(at_step_end)")
    assert late != command.SCRIPT
    (tmp_path / "late").mkdir()
    _, own = _run_script(tmp_path / "late", late.format(steps=command.STEPS))
    assert own["meter_steps_seen"] == [1, 2, 3, 4] and vd.command_window(own, command.STEPS)[0] == "FAIL"


def _meter_result(peaks, step_peak=None, **kw):
    steps = [{"cuda_peak_allocated": p} for p in peaks]
    return {"meter": "cuda", "device": {"type": "cuda", "name": "NVIDIA H200"}, "steps": steps, "measure_skip": 1,
            "metrics": {"step_peak_bytes": max(peaks[1:], default=None) if step_peak is None else step_peak,
                        "optimizer_steps": len(peaks)}, **kw}


@pytest.mark.parametrize("result, own, expected", [
    (_meter_result([5, 10, 10, 10]), {"peaks": [5, 10, 10, 10]}, "PASS"),
    (_meter_result([5, 10, 10, 10]), {"peaks": [5, 12, 12, 12]}, "FAIL"),       # another window (~20% off)
    (_meter_result([5, 10, 10, 10], step_peak=12), {"peaks": [5, 10, 10, 10]}, "FAIL"),
    (_meter_result([5, 10]), {"peaks": [5]}, "FAIL"),                            # one step: no crash, a FAIL
    (_meter_result([5]), {"peaks": [5]}, "FAIL"),
    (_meter_result([5, 10]), {}, "FAIL"),
    (None, None, "FAIL"),
])
def test_the_command_meter_is_compared_step_by_step_and_never_crashes(result, own, expected):
    assert vd.command_vs_script(result, own)[0] == expected


def test_the_command_steps_device_check_reads_what_ran_not_what_was_asked():
    own = {"device": "cuda", "param_device": "cuda"}
    assert vd.command_on_cuda(_meter_result([5, 10]), own)[0] == "PASS"
    fell_back = {"device": "cpu", "param_device": "cpu"}       # the script's silent fall back to the CPU
    assert vd.command_on_cuda(_meter_result([5, 10]), fell_back)[0] == "FAIL"
    asked_only = {**_meter_result([5, 10]), "steps": [{}, {}], "device": {"type": "cuda", "name": None}}
    assert vd.command_on_cuda(asked_only, own)[0] == "FAIL"     # the meter was asked cuda, its steps saw none
    assert vd.command_on_cuda({**_meter_result([5, 10]), "meter": "cpu-dispatch"}, own)[0] == "FAIL"
    assert vd.command_ran(verdicts.INNER_TIMEOUT, None, 4)[0] == "INCOMPLETE"
    assert vd.command_ran(0, _meter_result([5, 10, 10]), 4)[0] == "FAIL"
    assert vd.command_nvml({"metrics": {"nvml_used_peak_bytes": 9, "cuda_reserved_peak_bytes": 10}})[0] == "FAIL"


# --- results written as they go; no missing value crashes a step ------------------------------------
KILLED_REFERENCE = """import os, signal, sys
sys.path.insert(0, {bench!r})
import importlib.util
spec = importlib.util.spec_from_file_location("reference", os.path.join({bench!r}, "reference.py"))
reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reference)
run_cell, done = reference._cells.run_cell, []
def killing(spec, cell):
    if done:
        os.kill(os.getpid(), signal.SIGKILL)           # killed in its second cell
    done.append(cell)
    return run_cell(spec, cell)
reference._cells.run_cell = killing
sys.exit(reference.main(sys.argv[1], sys.argv[2:]))
"""


def test_a_killed_reference_run_keeps_its_finished_cells(tmp_path):
    script, out = tmp_path / "killed.py", tmp_path / "reference.json"
    script.write_text(KILLED_REFERENCE.format(bench=str(BENCH)))
    proc = subprocess.run([sys.executable, str(script), str(out), "--device", "cpu", "--sizes", "32", "--precisions",
                           "fp32", "--ga", "1,2", "--isolate", "off", "--no-attribution"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    kept = json.loads(out.read_text())
    assert kept["partial"] == {"done": 1, "planned": 2} and list(kept["cells"]) == ["fp32.ga1.h32"]
    assert kept["meters"] == {"fp32.ga1.h32": "cpu-dispatch"} and kept["device"]["type"] == "cpu"
    assert verdicts.unfinished(kept) == "partial (1 of 2 cells)"
    meter = _module("meter")
    assert meter.reference_verdict(verdicts.INNER_TIMEOUT, kept)[0] == "INCOMPLETE"
    assert meter.reference_verdict(0, kept)[0] == "FAIL"


def test_the_seed_table_shows_a_missing_number_as_a_dash():
    seed = _module("seed")
    cells = [{"precision": p, "ga": g, "hidden": 64, "peak_bytes": 100 * g} for p in ("fp32", "bf16") for g in (1, 2)]
    rows = seed.rows("pythia-1.4b", {"cells": cells})               # no n_params: no GA cost, no count
    assert rows == [["pythia-1.4b", "bf16", "0.86", "-", "-", "-", "-"], ["pythia-1.4b", "fp32", "0.29", "-", "-", "-",
                                                                       "-"]]
    cells = [{**c, "n_params": 1000} for c in cells]
    assert seed.rows("pythia-1.4b", {"cells": cells})[0] == ["pythia-1.4b", "bf16", "0.86", "0.100", "-", "-", "1,000"]
    assert gf.num(None, ",") == gf.num("12", ".3f") == gf.num(True, ".1f") == "-"
