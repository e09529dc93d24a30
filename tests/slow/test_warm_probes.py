"""The built-in probes in warm workers (bisector.measure.warm_pool), for real: ga_memory measures the
same bytes, sites and precision proofs as in a fresh interpreter, in either loop from one worker; runs
with other arguments share their environment's worker and the per-run variables never reach it; the
CUDA rule (a worker whose imports initialised CUDA is refused: CUDA only in the runs); a stats-mode
bisect whose every sample forks from one worker per environment, with the environment's import proved
by a warm run; and SIGTERM during a warm run stops it, its worker and the run, storing nothing."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bisector.measure.probe_process import run_probe
from bisector.job.probe import BuiltinProbe, ProbeBase
from bisector.measure.warm_pool import WarmPool
from bisector.measure.warm_server import WarmServer
from tests.process.test_warm_worker import WORKER, wait_gone

PYTHON = Path(sys.executable)
TINY = ["--hidden=64", "--layers=1", "--heads=2", "--vocab=128", "--seq-len=16", "--batch=2", "--warmup=1", "--steps=3"]
GA_SMALL = ["--sizes=64,128"]


def probe_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "BISECTOR_DEVICE": "cpu", "BISECTOR_CPUS": "2", **extra}


@pytest.fixture
def pool():
    p = WarmPool()
    yield p
    p.close()


def warm_run(pool: WarmPool, spec: ProbeBase, tmp_path: Path, **extra: str):
    return run_probe(spec, PYTHON, probe_env(**extra), workdir=tmp_path, warm=pool.bound("this interpreter"))


def _cells(result) -> dict:
    return {(c["precision"], c["ga"], c["hidden"]): (c["peak_bytes"], c.get("peak_phase"), c.get("precision_observed"))
            for c in result.model_dump()["cells"]}


def test_ga_memory_measures_the_same_bytes_warm_as_cold_in_either_loop_from_one_worker(pool, tmp_path):
    for served, loop in enumerate(["accelerate", "trainer"], start=1):
        spec = BuiltinProbe(name="ga_memory", args=[*GA_SMALL, f"--loop={loop}"])
        warm = warm_run(pool, spec, tmp_path)
        cold = run_probe(spec, PYTHON, probe_env(), workdir=tmp_path)
        assert warm.status.value == cold.status.value == "ok", (warm.reason, warm.stderr_tail[-2000:])
        assert warm.launch["mode"] == "warm" and warm.launch["runs_served"] == served and cold.launch is None
        assert warm.metrics == cold.metrics
        cells = _cells(warm.result)
        assert cells == _cells(cold.result) and all(observed for *_, observed in cells.values())
        assert warm.result.model_dump()["knobs"] == cold.result.model_dump()["knobs"]


def test_runs_with_other_arguments_share_the_worker_and_per_run_variables_stay_out_of_it(pool, tmp_path):
    first = warm_run(pool, BuiltinProbe(name="step_time", args=TINY), tmp_path, CUDA_VISIBLE_DEVICES="GPU-not-here")
    second = warm_run(pool, BuiltinProbe(name="step_time", args=[*TINY, "--precisions=fp32", "--seed=3"]), tmp_path)
    assert first.status.value == second.status.value == "ok", first.stderr_tail[-2000:]
    assert first.launch["worker_pid"] == second.launch["worker_pid"] and second.launch["runs_served"] == 2
    assert "worker_start_s" in first.launch and "worker_start_s" not in second.launch
    assert set(first.result.model_dump()["precision_proof"]) == {"fp32", "bf16"}
    worker_env = Path(f"/proc/{first.launch['worker_pid']}/environ").read_bytes().split(b"\0")
    names = {v.split(b"=", 1)[0].decode() for v in worker_env if v}
    assert not names & {"CUDA_VISIBLE_DEVICES", "BISECTOR_RESULT", "BISECTOR_CPUS"} and "BISECTOR_DEVICE" in names
    third = warm_run(pool, BuiltinProbe(name="step_time", args=TINY), tmp_path, TRANSFORMERS_VERBOSITY="error")
    assert third.launch["worker_pid"] != first.launch["worker_pid"]  # another shared environment: its own worker
    assert {s.pid for s in pool.alive()} == {first.launch["worker_pid"], third.launch["worker_pid"]}
    warm_run(pool, BuiltinProbe(name="step_time", args=TINY), tmp_path)  # the first worker, used last
    fourth = warm_run(pool, BuiltinProbe(name="step_time", args=TINY), tmp_path, TRANSFORMERS_VERBOSITY="info")
    assert wait_gone(third.launch["worker_pid"])  # at most two stay: the least recently used idle one ends
    assert {s.pid for s in pool.alive()} == {first.launch["worker_pid"], fourth.launch["worker_pid"]}


def test_a_worker_whose_imports_initialised_cuda_is_refused(tmp_path):
    """The rule: CUDA is initialised only in the runs. torch.cuda's own flag stands in for the CUDA runtime
    this CPU machine lacks (on a GPU the worker also refuses when libcuda or NVML is loaded)."""
    script = tmp_path / "cuda_probe.py"
    script.write_text("def warm_imports():\n    import torch\n    torch.cuda._initialized = True\n")
    server = WarmServer(PYTHON, WORKER, script, dict(os.environ))
    try:
        assert "CUDA was initialised by the imports" in (server.wait_ready(120) or "")
    finally:
        server.close()


# -- through bisector run / probe, over real candidate environments --------------------------------

@pytest.fixture(scope="module")
def accelerate_envs(tmp_path_factory):
    return tmp_path_factory.mktemp("warm-envs")


def bisector(*args: str, cache: Path, store: Path) -> list[str]:
    return [sys.executable, "-m", "bisector", *args, "--store", str(store), "--cache-dir", str(cache)]


def test_stats_mode_samples_fork_from_one_warm_worker_per_environment(tmp_path, accelerate_envs):
    runs = []
    for store in (tmp_path / "first.db", tmp_path / "again.db"):  # the second finds the environments built
        argv = bisector("run", "--package", "accelerate", "--mode", "releases", "--good", "0.27.0", "--bad", "0.27.1",
                        "--probe", "step_time", *[f"--probe-arg={a}" for a in TINY], "--metric", "step_seconds",
                        "--compare", "stats", "--max-repeats", "12", "--json", cache=accelerate_envs, store=store)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        assert proc.returncode in (0, 3), proc.stderr[-3000:]
        rows = sqlite3.connect(store).execute("SELECT env_fingerprint, details FROM measurements ORDER BY created")
        rows = [(env, json.loads(details)) for env, details in rows]
        assert not [d["stderr_tail"] for _, d in rows if "Exception ignored" in d["stderr_tail"]]  # atexit hooks clean
        runs.append([(env, details["launch"]) for env, details in rows])
    for launches in runs:
        assert len(launches) >= 24 and all(launch["mode"] == "warm" for _, launch in launches), launches[:3]
        workers = {env: {launch["worker_pid"] for e, launch in launches if e == env} for env, _ in launches}
        assert len(workers) == 2 and all(len(pids) == 1 for pids in workers.values())  # two workers, interleaved
    healths = {json.loads(p.read_text())["health"] for p in accelerate_envs.glob("envs/*/bisector-env.json")}
    assert healths == {"proved"}  # each new environment's import proved by its first (warm) run
    first_good, first_bad = (launch for _, launch in runs[1][:2])
    spans = [(x["worker_started_at"], x["worker_started_at"] + x["worker_start_s"]) for x in (first_good, first_bad)]
    assert max(s for s, _ in spans) < min(e for _, e in spans)  # both endpoints' workers started together
    assert first_bad["worker_wait_s"] < 0.5  # ready before the first pair was taken


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _worker_children(ancestor: int) -> tuple[int, list[int]]:
    """The warm worker under ``ancestor`` (below its launcher) and its children (the runs), or (0, [])."""
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            ppid = _parent(pid)
            above = _parent(ppid) if ppid > 1 else 0
        except OSError:
            continue
        if b"/warm_worker.py" in cmd and ancestor in (ppid, above) \
                and b"proc_launcher" not in cmd:
            kids = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
            return pid, kids
    return 0, []


def test_sigterm_during_a_warm_run_stops_it_and_its_worker_and_stores_nothing(tmp_path, accelerate_envs):
    store = tmp_path / "s.db"
    argv = bisector("probe", "--with", "accelerate==0.27.0", "--probe", "step_time", "--probe-arg=--steps=100000",
                    "--fresh", cache=accelerate_envs, store=store)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    worker, runs = 0, []
    while not runs:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:] if proc.poll() else ""
        worker, runs = _worker_children(proc.pid)
        time.sleep(0.1)
    time.sleep(1.0)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - start < 5 and proc.returncode == 130, err[-2000:]
    for pid in (worker, *runs):
        assert wait_gone(pid), f"{pid} outlived the run"
    count = sqlite3.connect(store).execute("SELECT count(*) FROM measurements").fetchone()[0] if store.exists() else 0
    assert count == 0
