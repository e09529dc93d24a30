"""The command meter (probes/command) on real programs: real processes, the shared base's torch, no venv.

Each program is an unmodified training script; the meter is injected through ``sitecustomize`` and
must count exactly what the step allocates, leave the program's output and exit code alone, follow
children and ranks, and say what it could not measure instead of giving a number.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.command_meter import LOOP, MB, meter  # noqa: E402  (the runner and loop the meter's tests share)
from tests.support.command_meter import write as _write  # noqa: E402


def test_step_peak_is_exact_and_warm_up_is_left_out(tmp_path):
    _write(tmp_path, "train.py", LOOP.format(steps=4, mb=MB))
    done, r = meter(tmp_path, sys.executable, "train.py")
    assert done.returncode == 0, done.stderr
    m = r["metrics"]
    assert m["optimizer_steps"] == 4 and r["meter"] == "cpu-dispatch" and r["device"]["type"] == "cpu"
    assert MB <= m["step_peak_bytes"] < MB + 8192            # the 10 MB temporary, plus w, its grad, scalars
    assert 5 * MB <= m["peak_bytes"] < 5 * MB + 8192         # the warm-up's 50 MB is in the run, not the steps
    assert [s["i"] for s in r["steps"]] == [0, 1, 2, 3] and r["steps"][0]["peak_bytes"] >= 5 * MB
    assert m["step_seconds"] > 0 and m["wall_seconds"] >= m["step_seconds"] and m["rss_peak_bytes"] > MB
    assert r["versions"]["torch"] and r["scope"] == "optimizer steps"


def test_the_program_computes_and_prints_the_same(tmp_path):
    _write(tmp_path, "train.py", LOOP.format(steps=3, mb=MB) + "import sys; sys.exit(0)\n")
    plain = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    done, r = meter(tmp_path, sys.executable, "train.py")
    assert plain.returncode == done.returncode == 0
    assert done.stdout == plain.stdout and "loss" in plain.stdout   # same losses and weights, nothing added
    failing = _write(tmp_path, "fail.py", "import torch, sys\nprint('partial')\nsys.exit(3)\n")
    done, r = meter(tmp_path, sys.executable, failing.name)
    assert done.returncode == 3 and r is None and done.stdout == "partial\n"   # its code; no result to read


def test_no_optimizer_step_gives_whole_run_metrics_and_says_so(tmp_path):
    _write(tmp_path, "infer.py", "import torch\nx = torch.ones(3_000_000)\ny = x * 2\nprint(float(y.sum()))\n")
    done, r = meter(tmp_path, sys.executable, "infer.py")
    m = r["metrics"]
    assert m["optimizer_steps"] == 0 and 24_000_000 <= m["peak_bytes"] < 24_100_000
    assert "step_peak_bytes" not in m and "step_seconds" not in m   # absent, never zero
    assert "stepped no optimizer" in r["absent"]["step_peak_bytes"] and r["scope"].startswith("whole run")


def test_what_the_meter_cannot_see_is_an_error_never_a_number(tmp_path):
    _write(tmp_path, "train.py", LOOP.format(steps=2, mb=MB))
    done, r = meter(tmp_path, sys.executable, "-I", "train.py")   # -I ignores PYTHONPATH: no meter loads
    assert r["metrics"] == {} and "loaded in no process" in r["error"]
    done, r = meter(tmp_path, sys.executable, "-c", "print('no torch here')")
    assert r["metrics"] == {} and "imported torch" in r["error"]


def test_children_and_a_killed_process(tmp_path):
    """A forked child that never steps changes nothing; a process that dies by os._exit keeps its steps;
    the environment's own sitecustomize still runs after the meter's."""
    _write(tmp_path, "train.py", LOOP.format(steps=3, mb=MB) + textwrap.dedent("""
        import multiprocessing as mp
        def child():   # a DataLoader-worker-like child: Python work, no optimizer, no tensor ops
            sum(bytearray(30_000_000))
        p = mp.get_context("fork").Process(target=child)
        p.start(); p.join()
        import os; os._exit(0)
        """))
    own = tmp_path / "own_site"
    own.mkdir()
    (own / "sitecustomize.py").write_text(f"open({str(tmp_path / 'own-ran')!r}, 'w').write('yes')\n")
    done, r = meter(tmp_path, sys.executable, "train.py", env={"PYTHONPATH": str(own)})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "own-ran").read_text() == "yes"
    assert r["processes"] == 2 and len(r["ranks"]) == 1              # the child is seen, and left out
    assert r["metrics"]["optimizer_steps"] == 3 and MB <= r["metrics"]["step_peak_bytes"] < MB + 8192
    assert "step_peak_bytes.rank0" not in r["metrics"]


def test_two_gloo_ranks_under_torch_distributed_run(tmp_path):
    _write(tmp_path, "ddp.py", """
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            extra = torch.ones(10_000_000 * (rank + 1), dtype=torch.uint8)   # rank 1 holds twice rank 0's
            model(torch.ones(4, 64)).sum().backward()
            del extra
            opt.step(); opt.zero_grad()
        dist.destroy_process_group()
        """)
    done, r = meter(tmp_path, sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                    "--master_port", "29611", "ddp.py", env={"OMP_NUM_THREADS": "1"}, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    m = r["metrics"]
    assert [x["rank"] for x in r["ranks"]] == [0, 1] and r["processes"] == 3   # the launcher, two ranks
    assert MB <= m["step_peak_bytes.rank0"] < 1.1 * MB and 2 * MB <= m["step_peak_bytes.rank1"] < 2.1 * MB
    assert m["step_peak_bytes"] == m["step_peak_bytes.rank1"] and m["optimizer_steps.rank0"] == 3


@pytest.mark.parametrize("kind", ["rss"])
def test_rss_meter_counts_no_tensors(tmp_path, kind):
    _write(tmp_path, "train.py", LOOP.format(steps=3, mb=MB))
    done, r = meter(tmp_path, sys.executable, "train.py", args=("--meter", kind))
    m = r["metrics"]
    assert r["meter"] == "rss" and "step_peak_bytes" not in m and m["rss_peak_bytes"] > MB
    assert m["optimizer_steps"] == 3 and "--meter rss" in r["absent"]["step_peak_bytes"]


def test_a_hanging_command_is_stopped_at_the_timeout_with_its_whole_tree(tmp_path):
    from bisector.core.measurement import Status
    from bisector.measure.probe_process import run_probe
    from bisector.job.probe import ProgramProbe
    from tests.support.hostile import processes_with

    marker = f"hang-{tmp_path.name}"
    _write(tmp_path, "hang.py", f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{marker}"])
        time.sleep(300)
        """)
    spec = ProgramProbe(command=[sys.executable, "hang.py"], cwd=tmp_path, timeout=4)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    outcome = run_probe(spec, Path(sys.executable), env)
    assert outcome.status is Status.TIMEOUT and "timed out" in outcome.reason
    assert processes_with(marker) == []   # the grandchild went with the command


def test_model_factory_is_found_where_the_user_keeps_it(tmp_path):
    """--probe-arg=--model-factory=MODULE:FUNCTION from the module's directory: the probe runs in a scratch
    directory with PYTHONPATH cleared, and finds the module through $BISECTOR_USER_PATH (what take.py sets)."""
    from bisector.measure.take import USER_PATH_ENV, user_path

    home = tmp_path / "mine"
    home.mkdir()
    _write(home, "mymodel.py", """
        import torch

        class Tiny(torch.nn.Module):
            def __init__(self, hidden, vocab):
                super().__init__()
                self.emb, self.out = torch.nn.Embedding(vocab, hidden), torch.nn.Linear(hidden, vocab)

            def forward(self, input_ids=None, labels=None):
                logits = self.out(self.emb(input_ids))
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
                return type("Out", (), {"loss": loss})()

        def build(hidden, layers, heads, vocab, max_positions, use_cache):
            return Tiny(hidden, vocab)
        """)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    old = os.getcwd()
    os.chdir(home)
    try:
        path = user_path()
    finally:
        os.chdir(old)
    probe = Path(__file__).resolve().parents[2] / "probes" / "ga_memory" / "__main__.py"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BISECTOR_RESULT")}
    done = subprocess.run([sys.executable, str(probe), "--model-factory", "mymodel:build", "--sizes", "32,64",
                           "--precisions", "fp32", "--ga", "1", "--no-gradient-checkpointing", "--device", "cpu",
                           "--workers", "1", "--result", str(scratch / "r.json")], cwd=scratch, capture_output=True,
                          text=True, timeout=180, env={**env, USER_PATH_ENV: path})
    assert done.returncode == 0, done.stderr[-1500:]
    assert "peak_bytes.fp32.ga1.h64" in json.loads((scratch / "r.json").read_text())["metrics"]


OLD_TORCH = '''
import importlib.abc, importlib.util, sys


class _OldTorch(importlib.abc.MetaPathFinder):
    """torch as it was before 2.0, to the meter: no global optimizer hooks (taken away once torch.profiler,
    the last of torch's own modules to import them, has them)."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch.profiler":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            for hook in ("register_optimizer_step_pre_hook", "register_optimizer_step_post_hook"):
                delattr(sys.modules["torch.optim.optimizer"], hook)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _OldTorch())
'''


def test_torch_without_global_optimizer_hooks_says_so_not_that_no_optimizer_stepped(tmp_path):
    _write(tmp_path, "train.py", LOOP.format(steps=3, mb=MB))
    own = tmp_path / "own_site"
    own.mkdir()
    (own / "sitecustomize.py").write_text(OLD_TORCH)
    done, r = meter(tmp_path, sys.executable, "train.py", env={"PYTHONPATH": str(own)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert r["optimizer_hooks"] is False and r["metrics"]["optimizer_steps"] == 0 and "step_peak_bytes" not in r["metrics"]
    why = r["absent"]["step_peak_bytes"]
    assert why.startswith(f"torch {r['versions']['torch']} has no global optimizer hooks (they came in torch 2.0)")
    assert "stepped no optimizer" not in why and r["scope"].endswith("has no global optimizer hooks)")
    assert r["metrics"]["peak_bytes"] >= 5 * MB   # the whole run is still measured


def test_measure_skip_beyond_the_steps_taken_is_named_and_is_bad_input_to_the_host(tmp_path):
    from bisector.core.measurement import Measurement, Status
    from bisector.job.probe.program_metrics import steps_left_out

    _write(tmp_path, "train.py", LOOP.format(steps=4, mb=MB))
    done, r = meter(tmp_path, sys.executable, "train.py", args=("--measure-skip", "10"))
    assert done.returncode == 0 and "step_peak_bytes" not in r["metrics"] and r["metrics"]["optimizer_steps"] == 4
    assert r["absent"]["step_peak_bytes"] == "4 optimizer step(s) seen and --measure-skip 10 leaves none to measure"
    m = Measurement(key="k", package="p", candidate="1.3.0", env_fingerprint="e", probe_fingerprint="f",
                    status=Status.OK, seconds=1.0, metrics=r["metrics"],
                    details={"result": {k: v for k, v in r.items() if k != "metrics"}})
    assert steps_left_out(m) == ("--measure-skip 10 leaves none of the 4 optimizer steps the command took (at 1.3.0) "
                                 "to measure: give --measure-skip below 4")


def test_a_program_the_environment_lacks_is_an_environment_failure_never_a_crash(tmp_path):
    from bisector.core.measurement import Status
    from bisector.measure.probe_process import run_probe
    from bisector.job.probe import ProgramProbe

    done, r = meter(tmp_path, "no-such-program-33", "x")
    assert done.returncode == 127 and r["missing_program"] == "no-such-program-33" and r["metrics"] == {}
    assert "'no-such-program-33' is neither in this environment (its bin, its console scripts) nor on PATH" in r["error"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    outcome = run_probe(ProgramProbe(command=["no-such-program-33"], cwd=tmp_path), Path(sys.executable), env)
    assert outcome.status is Status.ENV_FAILED and outcome.reason == r["error"]   # SKIP, even with --crash-is-bad
    outcome = run_probe(ProgramProbe(command=["./gone.sh"], cwd=tmp_path), Path(sys.executable), env)
    assert outcome.status is Status.ENV_FAILED and "./gone.sh does not exist" in outcome.reason


def test_accelerate_launch_is_measured_as_its_one_rank(tmp_path):
    pytest.importorskip("accelerate")
    _write(tmp_path, "train.py", """
        import torch
        from accelerate import Accelerator

        accelerator = Accelerator(cpu=True)
        model = torch.nn.Linear(64, 64)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        for step in range(3):
            scratch = torch.ones(10_000_000, dtype=torch.uint8)
            accelerator.backward(model(torch.ones(4, 64)).sum())
            del scratch
            optimizer.step()
            optimizer.zero_grad()
        """)
    done, r = meter(tmp_path, sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "1",
                    "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "train.py",
                    env={"OMP_NUM_THREADS": "1"}, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    m = r["metrics"]
    assert r["processes"] == 2 and [(x["rank"], x["steps"]) for x in r["ranks"]] == [(0, 3)]   # the launcher: no rank
    assert m["optimizer_steps"] == 3 and MB <= m["step_peak_bytes"] < MB + 65536
    assert not any(".rank" in k for k in m)   # one rank: no per-rank copies
