"""Where a bisect step spends its time, and the tool's own overhead as a share of it.

Runs a warm bisect of accelerate (default 0.27.0 .. 0.28.0 with the built-in ga_memory probe and
its --timings): a first run builds (or reuses) the environments, the measured run uses a fresh
store with that warm environment cache, as a user's second bisect would. From the stored
measurements it splits the steps into

  environment ready             ensure() of the cached environment
  probe process                 interpreter start + imports, model build, measured steps, rest
  tool                          everything else: CLI start, index lookup, search, store, report

and prints the tool's overhead (everything except the probe processes) as a share of the run.
Target: under 10%. Usage: python bench/step.py [--good 0.27.0] [--bad 0.28.0] [--cache-dir DIR]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bisector.storage import Store  # noqa: E402


def bisect(good: str, bad: str, cache: Path, store: Path) -> float:
    argv = [sys.executable, "-m", "bisector", "run", "--package", "accelerate", "--mode", "releases", "--good", good,
            "--bad", bad, "--probe", "ga_memory", "--probe-arg=--timings", "--metric", "ga_excess_bytes_per_param",
            "--threshold", "0.5", "--cache-dir", str(cache), "--store", str(store), "--no-prefetch"]
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if done.returncode not in (0, 3):
        raise SystemExit(f"bisector failed: {done.stderr[-1500:]}")
    return time.monotonic() - start


def split(store: Path) -> dict[str, float]:
    parts = dict.fromkeys(("environment ready", "probe: interpreter start", "probe: imports", "probe: model build",
                           "probe: measured steps", "probe: rest (setup, fit, result, exit)"), 0.0)
    measurements = Store(store).measurements_for("accelerate")
    for m in measurements:
        env_s = m.details.get("env_seconds", 0.0)
        t = (m.details.get("result") or {}).get("timings") or {}
        inside = [t.get(k, 0.0) for k in ("interpreter_start_s", "imports_s", "model_build_s", "steps_s")]
        parts["environment ready"] += env_s
        for name, value in zip(list(parts)[1:5], inside):
            parts[name] += value
        parts["probe: rest (setup, fit, result, exit)"] += m.seconds - env_s - sum(inside)
    parts["steps"] = len(measurements)
    return parts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--good", default="0.27.0")
    parser.add_argument("--bad", default="0.28.0")
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bisector-bench-step-"))
    cache = args.cache_dir or tmp / "cache"
    bisect(args.good, args.bad, cache, tmp / "warmup.db")
    wall = bisect(args.good, args.bad, cache, tmp / "measured.db")
    parts = split(tmp / "measured.db")
    steps = int(parts.pop("steps"))
    probe = sum(v for k, v in parts.items() if k.startswith("probe"))
    parts["tool: CLI, index, search, store, report"] = wall - probe - parts["environment ready"]
    print(f"warm bisect of accelerate {args.good}..{args.bad}: {steps} steps, {wall:.1f} s")
    print(f"{'part':<44} {'s/step':>7} {'share':>7}")
    for name, seconds in parts.items():
        print(f"{name:<44} {seconds / steps:7.2f} {seconds / wall:7.1%}")
    overhead = wall - probe
    print(f"tool overhead (everything but the probe processes): {overhead / steps:.2f} s/step = "
          f"{overhead / wall:.1%} of the run (target < 10%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
