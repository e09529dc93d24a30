"""Where one bisect step spends its time, and the tool's own overhead as a share of it.

Runs `bisector probe --with accelerate==<version>` (the default job's step: environment, probe,
store, report) twice against a fresh store: the first builds or reuses the environment (warming
it), the second is the warm step that a bisect repeats. The split of the warm step:

  environment ready          ensure() of the cached environment
  probe: interpreter + imports, model build, steps, rest   (from the probe's --timings)
  tool: CLI start, index lookup, store and report          (wall minus environment and probe)

Overhead = everything except the probe process, as a share of the step. Target: under 10%.
Usage: python bench/step.py [--version 0.22.0] [--cache-dir DIR]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def step(version: str, cache: Path, store: Path) -> tuple[float, dict]:
    argv = [sys.executable, "-m", "bisector", "probe", "--with", f"accelerate=={version}", "--probe-arg=--timings",
            "--cache-dir", str(cache), "--store", str(store), "--json"]
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"bisector probe failed: {done.stderr[-1500:]}")
    return wall, json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--version", default="0.22.0")
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bisector-bench-step-"))
    cache = args.cache_dir or tmp / "cache"
    step(args.version, cache, tmp / "warmup.db")            # build (or reuse) the environment
    wall, m = step(args.version, cache, tmp / "fresh.db")   # the warm step
    env_s = m["details"]["env_seconds"]
    probe_s = m["seconds"] - env_s
    t = m["details"]["result"].get("timings", {})
    inside = {k: t.get(k, 0.0) for k in ("interpreter_start_s", "imports_s", "model_build_s", "steps_s")}
    rows = [("environment ready (cached)", env_s),
            ("probe: interpreter start", inside["interpreter_start_s"]),
            ("probe: imports", inside["imports_s"]),
            ("probe: model build", inside["model_build_s"]),
            ("probe: measured steps", inside["steps_s"]),
            ("probe: rest (setup, fit, result, exit)", probe_s - sum(inside.values())),
            ("tool: CLI start, index lookup, store, report", wall - m["seconds"])]
    print(f"{'part of one warm step':<48} {'seconds':>8} {'share':>7}")
    for name, seconds in rows:
        print(f"{name:<48} {seconds:8.2f} {seconds / wall:7.1%}")
    overhead = wall - probe_s
    print(f"{'total':<48} {wall:8.2f}")
    print(f"tool overhead (everything but the probe process): {overhead:.2f} s = {overhead / wall:.1%} of the step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
