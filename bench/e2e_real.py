"""The real two-level bisect of the README, cold then warm: where a bisect's wall time goes.

    python bench/e2e_real.py --repo ~/src/accelerate [--good 0.20 --bad 1.0]

Runs `bisector run --good G --bad B --probe-arg=--loop=accelerate --repo REPO` (releases, then the
commits between the boundary releases) twice: cold (an empty bisector cache and store; uv's own
package cache as it is) and warm (the same cache, an empty store: every environment reused, every
probe run again). Prints for each: wall seconds, the sum of the probe processes' own seconds (a warm
worker's start included, also where it started ahead of its first run; two started at once both count),
their ratio (target: at most 1.15 cold), steps, and the commit named. Needs the package index.
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(repo: str, good: str, bad: str, cache: Path, store: Path) -> dict:
    argv = [sys.executable, "-m", "bisector", "run", "--good", good, "--bad", bad, "--probe-arg=--loop=accelerate",
            "--repo", repo, "--cache-dir", str(cache), "--store", str(store), "--json"]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"bisect failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout)
    db = sqlite3.connect(store)
    probe_s = 0.0
    for (text,) in db.execute("SELECT details FROM measurements WHERE run_id=?", (out["run_id"],)):
        details = json.loads(text)
        launch = details.get("launch") or {}  # a warm worker started ahead of its first run counts as probe time
        probe_s += details.get("probe_seconds", 0.0)
        probe_s += launch.get("worker_start_s", 0.0) - launch.get("worker_wait_s", 0.0)
    first = out["first_bad"] or {}
    return {"wall": wall, "probe": probe_s, "steps": len(out["steps"]), "probes": out["probes_run"],
            "named": f"{first.get('ref')} (#{first.get('pr')})" if first.get("pr") else first.get("ref")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True, help="a local clone of accelerate")
    ap.add_argument("--good", default="0.20")
    ap.add_argument("--bad", default="1.0")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        rows = [("cold", run(args.repo, args.good, args.bad, cache, Path(tmp) / "cold.db")),
                ("warm", run(args.repo, args.good, args.bad, cache, Path(tmp) / "warm.db"))]
    print(f"{'run':<5} {'wall s':>8} {'probes s':>9} {'wall/probes':>12} {'steps':>6} {'probes':>7}  named")
    for name, r in rows:
        print(f"{name:<5} {r['wall']:8.1f} {r['probe']:9.1f} {r['wall'] / max(r['probe'], 1e-9):11.2f}x "
              f"{r['steps']:6d} {r['probes']:7d}  {r['named']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
