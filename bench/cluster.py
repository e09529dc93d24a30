"""Benchmark of the ray executor: a k-way bisect on k logical GPUs, and the tool's overhead per task.

Run as ``python bench/cluster.py`` (needs Ray next to bisector: ``pip install ".[ray]"`` in a clone). Part 1: a generated repository of
N = 200 commits (the step planted at commit 137), bisected by ``--executor ray --jobs k`` on a
local Ray with k = 1, 2, 4 and 8 logical GPUs and a synthetic probe of fixed duration (an
environment cache per k: each row first runs cold, building its own environments, then warm, with
that cache and an empty store). Prints rounds, probes, wall time (warm) and the speed-up against
k = 1, and the cold wall time, and checks rounds <= ceil(log_(k+1) N) + 2. Part 2: the same
probe with no sleep, measured one at a time in a warm environment, through the local executor and
through Ray; the overhead per task is the wall time per measurement minus the bare probe run
(the same script started directly); target on Ray: under 0.5 s. Exits 1 when a check fails.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep the local Ray on loopback

import ray  # noqa: E402

from bench.search import ceil_log  # noqa: E402
from bisector.cli.main import main  # noqa: E402
from bisector.core.candidate import Candidate, CandidateKind  # noqa: E402
from bisector.core.search import Search  # noqa: E402
from bisector.core.verdict import Verdict  # noqa: E402
from bisector.envs import EnvManager, load_env_spec  # noqa: E402
from bisector.measure.executors import LocalExecutor  # noqa: E402
from bisector.measure.gpus import GpuPool  # noqa: E402
from bisector.measure.measurer import Measurer  # noqa: E402
from bisector.measure.ray_executor import RayExecutor  # noqa: E402
from bisector.job.probe import ScriptProbe  # noqa: E402
from bisector.store.storage import Store  # noqa: E402
from bench.e2e import make_repo  # noqa: E402

N, BAD_AT, KS = 200, 137, (1, 2, 4, 8)
TINY_MODULE = 'BUFFER_KIB = {kib}\n__version__ = "{version}"\n'   # no torch: a task's cost is its sleep
TINY_PYPROJECT = ('[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
                  '[project]\nname = "{name}"\nversion = "{version}"\n\n[tool.setuptools]\npackages = ["{name}"]\n')
PROBE = '''import json, os, sys, time
import tinypkg
time.sleep(float(sys.argv[1]))
with open(os.environ["BISECTOR_RESULT"], "w") as fh:
    json.dump({"metrics": {"buffer_kib": float(tinypkg.BUFFER_KIB)}}, fh)
'''


def rounds_of(n: int, k: int, bad_at: int) -> tuple[int, int]:
    """The search's rounds and probes for this boundary (the phase asks it batch by batch)."""
    search, rounds, probes = Search(n, k), 0, 0
    while batch := search.next_batch():
        rounds, probes = rounds + 1, probes + len(batch)
        for i in batch:
            search.record(i, Verdict.BAD if i >= bad_at else Verdict.GOOD)
    return rounds, probes


def bisect_once(work: Path, repo: Path, shas: list[str], spec: Path, probe: Path, k: int, seconds: float,
                 store: Path) -> tuple[float, int, dict]:
    """One `bisector run --executor ray --jobs k` in this process (its output discarded): wall, exit code, result."""
    args = ["run", "--package", "tinypkg", "--mode", "commits", "--repo", str(repo), "--good", shas[0],
            "--bad", shas[-1], "--env", str(spec), "--store", str(store), "--cache-dir", str(work / f"cache{k}"),
            "--probe", str(probe), "--probe-arg", str(seconds), "--metric", "buffer_kib", "--threshold", "200",
            "--jobs", str(k), "--executor", "ray", "--json"]
    start = time.monotonic()
    with open(os.devnull, "w") as quiet:
        stdout, stderr = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = quiet
        try:
            code = main(args)
        finally:
            sys.stdout, sys.stderr = stdout, stderr
    return time.monotonic() - start, code, Store(store).get_run().result


def bisect_row(work: Path, repo: Path, shas: list[str], spec: Path, probe: Path, k: int, seconds: float) -> dict:
    """Cold (an empty environment cache of its own), then warm (that cache, an empty store)."""
    ray.init(num_cpus=k, num_gpus=k, include_dashboard=False, log_to_driver=False)
    try:
        cold, code_cold, first = bisect_once(work, repo, shas, spec, probe, k, seconds, work / f"k{k}-cold.db")
        warm, code_warm, result = bisect_once(work, repo, shas, spec, probe, k, seconds, work / f"k{k}-warm.db")
    finally:
        ray.shutdown()
    rounds, probes = rounds_of(N, k, BAD_AT)
    ok = code_cold == code_warm == 0 and first["first_bad"]["sha"] == result["first_bad"]["sha"] == shas[BAD_AT]
    return {"k": k, "cold": cold, "wall": warm, "rounds": rounds, "steps": len(result["steps"]),
            "probes_run": result["probes_run"], "ok": ok, "bound": ceil_log(k + 1, N) + 2}


def per_task(work: Path, repo: Path, shas: list[str], spec: Path, probe: Path, tasks: int) -> dict:
    """Seconds per measurement, one at a time in a warm environment: local, Ray, and the bare probe."""
    envs = EnvManager(work / "cache1")
    env_spec = load_env_spec(str(spec), Path("."))
    cand = Candidate(package="tinypkg", kind=CandidateKind.COMMIT, ref=shas[0])
    probe_spec = ScriptProbe(path=probe, args=["0"])
    out = {}
    ray.init(num_cpus=1, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        for name in ("local", "ray", "local", "ray"):  # interleaved, the first of each a warm-up
            executor = LocalExecutor(envs, GpuPool([])) if name == "local" else RayExecutor(cache_dir=str(work / "cache1"))
            m = Measurer(Store(work / f"{name}-{time.monotonic()}.db"), envs, env_spec, probe_spec, executor,
                         repo_path=repo)
            start = time.monotonic()
            for r in range(tasks):
                m.measure(cand, r)
            out[name] = (time.monotonic() - start) / tasks
            env_path = Path(Store(m.store.path).measurements_for("tinypkg")[0].env.path)
    finally:
        ray.shutdown()
    bare = []
    for _ in range(tasks):
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "BISECTOR_RESULT": str(Path(tmp) / "r.json"), "VIRTUAL_ENV": str(env_path)}
            start = time.monotonic()
            subprocess.run([str(env_path / "bin" / "python"), str(probe), "0"], env=env, check=True)
            bare.append(time.monotonic() - start)
    out["bare"] = statistics.mean(bare)
    return out


def main_bench() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="the synthetic probe's duration")
    parser.add_argument("--tasks", type=int, default=10, help="measurements per executor for the overhead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bisector-bench-cluster-") as tmp:
        work = Path(tmp)
        repo, shas = make_repo(work / "src", N, BAD_AT, name="tinypkg", module=TINY_MODULE, pyproject=TINY_PYPROJECT)
        spec, probe = work / "plain.toml", work / "fixed.py"
        spec.write_text('name = "plain"\nbase = "current"\n')
        probe.write_text(PROBE)
        rows = [bisect_row(work, repo, shas, spec, probe, k, args.seconds) for k in KS]
        cost = per_task(work, repo, shas, spec, probe, args.tasks)
    print(f"k-way bisect on Ray: N={N} commits, probe {args.seconds:.1f}s; wall: warm environment cache, empty store "
          "(cold: the row's own empty cache)")
    print("| k (logical GPUs) | rounds | bound | steps | probes run | wall s | speed-up vs k=1 | cold s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['k']} | {r['rounds']} | {r['bound']} | {r['steps']} | {r['probes_run']} | {r['wall']:.1f} | "
              f"{rows[0]['wall'] / r['wall']:.2f}x | {r['cold']:.1f} |")
    ray_over, local_over = cost["ray"] - cost["bare"], cost["local"] - cost["bare"]
    print(f"\nper task, warm environment, no sleep ({args.tasks} tasks each): bare probe {cost['bare']:.3f}s, "
          f"local {cost['local']:.3f}s (overhead {local_over:.3f}s), ray {cost['ray']:.3f}s "
          f"(overhead {ray_over:.3f}s; target < 0.5s)")
    failed = [r for r in rows if not r["ok"] or r["rounds"] > r["bound"]]
    for r in failed:
        print(f"FAIL: k={r['k']}: answer ok={r['ok']}, rounds {r['rounds']} vs bound {r['bound']}")
    if ray_over >= 0.5:
        print(f"FAIL: Ray overhead per task {ray_over:.3f}s >= 0.5s")
    return 1 if failed or ray_over >= 0.5 else 0


if __name__ == "__main__":
    sys.exit(main_bench())
