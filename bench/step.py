"""Where a bisect step spends its time, warm workers against fresh interpreters, and the tool's own overhead.

Runs a bisect of accelerate (default 0.27.0 .. 0.28.0, the default job: the ga_memory probe in the
Trainer loop with its --timings, and the contrast at both ends): a first run builds (or reuses) the
environments; the measured runs use fresh stores with that cache, as a user's second bisect would, once
with warm workers (the default: each environment's worker imports the ML stack once, each probe run is
a fork of it) and once with --no-warm (a fresh interpreter per probe run), one after the other. From the
stored measurements it splits each run into

  environment ready             ensure() of the cached environment
  warm workers: start           each worker's own start and imports (once per environment)
  probe                         interpreter start (or fork), imports, model build, measured steps, rest
  tool                          everything else: CLI start, index lookup, search, store, report

and prints the seconds a step, warm against cold, next to `python -c "import torch, transformers,
accelerate"` in the good endpoint's environment. Targets: a warm step at most 2.0 s; the tool's
overhead under 10%. Usage: python bench/step.py [--good 0.27.0] [--bad 0.28.0] [--cache-dir DIR]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bisector.envs import venv_run_env  # noqa: E402
from bisector.store.storage import Store  # noqa: E402

IMPORT = "import torch, transformers, accelerate"
PARTS = ("environment ready", "warm workers: start (imports, per worker)", "probe: interpreter start or fork",
         "probe: imports", "probe: model build", "probe: measured steps", "probe: rest (setup, fit, result, exit)",
         "tool: CLI, index, search, store, report")


def bisect(good: str, bad: str, cache: Path, store: Path, *extra: str) -> float:
    argv = [sys.executable, "-m", "bisector", "run", "--package", "accelerate", "--mode", "releases", "--good", good,
            "--bad", bad, "--probe-arg=--timings", "--cache-dir", str(cache), "--store", str(store), "--no-prefetch",
            *extra]
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if done.returncode not in (0, 3):
        raise SystemExit(f"bisector failed: {done.stderr[-1500:]}")
    return time.monotonic() - start


def split(store: Path, wall: float) -> tuple[dict[str, float], int, str]:
    """The run's wall split into PARTS, its step count and the good endpoint's environment."""
    parts = dict.fromkeys(PARTS, 0.0)
    measurements = Store(store).measurements_for("accelerate")
    for m in measurements:
        env_s = m.details.get("env_seconds", 0.0)
        launch = m.details.get("launch") or {}
        t = (m.result.fields() if m.result else {}).get("timings") or {}
        inside = [t.get(k, 0.0) for k in ("interpreter_start_s", "imports_s", "model_build_s", "steps_s")]
        parts["environment ready"] += env_s
        parts["warm workers: start (imports, per worker)"] += launch.get("worker_start_s", 0.0)
        for name, value in zip(PARTS[2:6], inside):
            parts[name] += value
        rest = m.seconds - env_s - launch.get("worker_wait_s", 0.0) - sum(inside)
        parts["probe: rest (setup, fit, result, exit)"] += rest
    parts["tool: CLI, index, search, store, report"] = wall - sum(parts.values())
    return parts, len(measurements), measurements[0].env.path


def import_seconds(env_dir: Path) -> float:
    times = []
    for _ in range(3):
        start = time.monotonic()
        subprocess.run([str(env_dir / "bin" / "python"), "-c", IMPORT], env=venv_run_env(env_dir, {}), check=True,
                       capture_output=True)
        times.append(time.monotonic() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--good", default="0.27.0")
    parser.add_argument("--bad", default="0.28.0")
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bisector-bench-step-"))
    cache = args.cache_dir or tmp / "cache"
    bisect(args.good, args.bad, cache, tmp / "warmup.db")
    runs = {}
    for name, extra in (("warm", ()), ("cold", ("--no-warm",))):
        wall = bisect(args.good, args.bad, cache, tmp / f"{name}.db", *extra)
        runs[name] = (wall, *split(tmp / f"{name}.db", wall))
    imports = import_seconds(Path(runs["warm"][3]))
    steps = runs["warm"][2]
    print(f"bisect of accelerate {args.good}..{args.bad}, default job: {steps} steps; warm {runs['warm'][0]:.1f} s, "
          f"cold (--no-warm) {runs['cold'][0]:.1f} s")
    print(f"{'part':<44} {'warm s/step':>11} {'share':>7} {'cold s/step':>11} {'share':>7}")
    for part in PARTS:
        cells = [f"{runs[n][1][part] / runs[n][2]:11.2f} {runs[n][1][part] / runs[n][0]:7.1%}"
                 for n in ("warm", "cold")]
        print(f"{part:<44} {cells[0]} {cells[1]}")
    warm_step, cold_step = (runs[n][0] / runs[n][2] for n in ("warm", "cold"))
    print(f"a step: warm {warm_step:.2f} s, cold {cold_step:.2f} s ({cold_step / warm_step:.2f}x); "
          f"python -c \"{IMPORT}\" in that environment: {imports:.2f} s (target: warm step <= 2.0 s: "
          f"{'met' if warm_step <= 2.0 else 'missed'})")
    tool = runs["warm"][1]["tool: CLI, index, search, store, report"]
    print(f"tool overhead (everything but environments, workers and probes), warm: {tool / steps:.2f} s/step = "
          f"{tool / runs['warm'][0]:.1%} of the run (target < 10%; two workers starting at once count twice above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
