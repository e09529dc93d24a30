"""The stats-mode speed bisect, with warm workers: what a sample costs next to one import of the ML stack.

    python bench/speed_bisect.py [--good 0.27.0] [--bad 0.28.0] [--samples 8] [--cold-bisect] [--cache-dir DIR]

Runs ``bisector run --probe step_time --metric step_seconds --compare stats --good G --bad B`` twice (the
first builds the environments; the second, measured, has an empty store and that cache), then, in the good
endpoint's environment and in one run of this script: the time of ``python -c "import torch,
transformers, accelerate"`` (median of 3), and ``--samples`` pairs of the same probe run cold (a fresh
interpreter) and warm (a fork of a warm worker), interleaved. Prints the bisect's wall time, its samples,
the per-sample wall (each sample's own, median, and the run's wall per sample) against the import, the
warm step against the cold one, and whether the step times they measure differ (Mann-Whitney U: the warm
worker must not change the number it measures). ``--cold-bisect`` also runs the bisect with --no-warm.
Target: per-sample wall at most 0.5x the import (the 44-sample run under 60 s on a 2-core machine).
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scipy.stats import mannwhitneyu  # noqa: E402

from bisector.envs import venv_run_env  # noqa: E402
from bisector.measure.probe_process import run_probe  # noqa: E402
from bisector.job.probe import BuiltinProbe  # noqa: E402
from bisector.measure.warm_pool import WarmPool  # noqa: E402

IMPORT = "import torch, transformers, accelerate"


def bisect(good: str, bad: str, cache: Path, store: Path, *extra: str) -> tuple[float, dict]:
    argv = [sys.executable, "-m", "bisector", "run", "--probe", "step_time", "--metric", "step_seconds",
            "--compare", "stats", "--good", good, "--bad", bad, "--cache-dir", str(cache), "--store", str(store),
            "--json", *extra]
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tempfile.gettempdir())
    wall = time.monotonic() - start
    if done.returncode not in (0, 3):
        raise SystemExit(f"bisector failed: {done.stderr[-1500:]}")
    return wall, json.loads(done.stdout)


def samples(store: Path) -> list[dict]:
    rows = sqlite3.connect(store).execute("SELECT details, metrics FROM measurements ORDER BY created").fetchall()
    return [{**json.loads(details), "metrics": json.loads(metrics)} for details, metrics in rows]


def import_seconds(python: Path, env: dict) -> float:
    times = []
    for _ in range(3):
        start = time.monotonic()
        subprocess.run([str(python), "-c", IMPORT], env=env, check=True, capture_output=True)
        times.append(time.monotonic() - start)
    return statistics.median(times)


def warm_against_cold(python: Path, env: dict, n: int) -> tuple[list, list]:
    """(wall, step_seconds) of ``n`` cold and ``n`` warm runs, interleaved (the worker started first)."""
    spec, pool = BuiltinProbe(name="step_time"), WarmPool()
    cold, warm = [], []
    try:
        pool.start(spec, python, env, "bench")
        for _ in range(n):
            for runs, warm_run in ((cold, None), (warm, pool.bound("bench"))):
                start = time.monotonic()
                out = run_probe(spec, python, env, warm=warm_run)
                if out.status.value != "ok":
                    raise SystemExit(f"step_time failed: {out.reason}")
                runs.append((time.monotonic() - start, out.metrics["step_seconds"]))
    finally:
        pool.close()
    return cold, warm


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--good", default="0.27.0")
    p.add_argument("--bad", default="0.28.0")
    p.add_argument("--samples", type=int, default=8, help="cold and warm probe runs each, interleaved")
    p.add_argument("--cold-bisect", action="store_true", help="also run the bisect with --no-warm")
    p.add_argument("--cache-dir", type=Path, default=None)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bisector-bench-speed-"))
    cache = args.cache_dir or tmp / "cache"
    bisect(args.good, args.bad, cache, tmp / "warmup.db")  # builds the environments it needs
    wall, out = bisect(args.good, args.bad, cache, tmp / "warm.db")
    taken = samples(tmp / "warm.db")
    env_dir = Path(taken[0]["env"]["path"]).expanduser()   # the environment as the measurement recorded it
    env = {**venv_run_env(env_dir, {}), "BISECTOR_DEVICE": "cpu", "BISECTOR_CPUS": "1"}
    python = env_dir / "bin" / "python"
    imports = import_seconds(python, env)
    cold, warm = warm_against_cold(python, env, args.samples)

    own = statistics.median(s["probe_seconds"] for s in taken)
    starts = [s["launch"]["worker_start_s"] for s in taken if "worker_start_s" in s["launch"]]
    modes = {s["launch"]["mode"] for s in taken}
    print(f"stats bisect of accelerate {args.good}..{args.bad} (step_time): {out['status']}, {len(taken)} samples, "
          f"{wall:.1f} s wall; launched {'/'.join(sorted(modes))}, {len(starts)} warm workers "
          f"(start {', '.join(f'{s:.2f}' for s in starts)} s)")
    print(f"{'':<46} {'s':>7} {'x import':>9}")
    rows = [(f"python -c \"{IMPORT}\" (median of 3)", imports),
            ("per sample: its own wall (median)", own),
            ("per sample: the run's wall / samples", wall / len(taken)),
            ("cold probe run (fresh interpreter, median)", statistics.median(w for w, _ in cold)),
            ("warm probe run (fork of the worker, median)", statistics.median(w for w, _ in warm))]
    for name, seconds in rows:
        print(f"{name:<46} {seconds:7.2f} {seconds / imports:8.2f}x")
    cold_steps, warm_steps = [s for _, s in cold], [s for _, s in warm]
    p_value = mannwhitneyu(cold_steps, warm_steps).pvalue
    faster = statistics.median(w for w, _ in cold) / statistics.median(w for w, _ in warm)
    print(f"warm step against cold: {faster:.1f}x "
          f"faster a run; step_seconds measured cold {statistics.median(cold_steps) * 1000:.1f} ms, warm "
          f"{statistics.median(warm_steps) * 1000:.1f} ms (MWU p={p_value:.2f}, {args.samples} each)")
    print(f"target: per-sample wall <= 0.5x the import: {own / imports:.2f}x "
          f"({'met' if own / imports <= 0.5 else 'missed'}); run's wall per sample {wall / len(taken) / imports:.2f}x")
    if args.cold_bisect:
        cold_wall, cold_out = bisect(args.good, args.bad, cache, tmp / "cold.db", "--no-warm")
        n = len(samples(tmp / "cold.db"))
        print(f"the same bisect with --no-warm: {cold_out['status']}, {n} samples, {cold_wall:.1f} s wall "
              f"({cold_wall / n:.2f} s a sample, {cold_wall / n / imports:.2f}x the import); warm {wall:.1f} s: "
              f"{cold_wall / wall:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
