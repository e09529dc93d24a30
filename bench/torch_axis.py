"""Benchmark: the torch axis for real, with torch's own wheels from the package index.

Runs, one after the other in one run:

* cold: ``bisector run --package torch --good 2.11 --bad 2.13 --probe ga_memory
  --probe-arg=--loop=accelerate --with accelerate==1.10.0`` with an empty environment cache and an
  empty store: each torch release the search measures becomes a base venv built by pip (CUDA wheels:
  about 2.5 GB each; prefetch builds the next midpoints' bases while a probe runs);
* cold with ``--prefetch``: the same in a cache of its own, the next midpoints' torch bases built
  while a probe runs (the default builds a base only when its candidate is measured: each one is
  GBs that the search may never need);
* warm: the first command again over the same cache and store (everything reused);
* every release: ``bisector matrix`` over a grid of every torch release in the range (accelerate pinned
  the same), over the same cache: each release measured, the bases the bisect built reused.

It reports each run's answer and time, the torch builds as their labels say, the bytes the machine
received while each ran (``/proc/net/dev``, every process on the machine: an upper bound on the
downloads) beside what the index says the files weigh, and the disk of each base: its own bytes, its
apparent size and what it shares with the bases built before it (hard links of identical CUDA library
files), and the bases' total with and without that sharing.

Needs the package index (several GB of torch CUDA wheels; about 20 GB of free disk) and takes 10-30
minutes. Run: ``python bench/torch_axis.py [--good 2.11 --bad 2.13] [--keep DIR]``
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bisector.core.units import human_bytes  # noqa: E402
from bisector.envs import estimate_torch_download as estimate  # noqa: E402
from bisector.envs import read_marker, torch_bases  # noqa: E402
from bisector.envs import disk_usage  # noqa: E402
from bisector.envs import read_info  # noqa: E402
from bisector.envs import CacheLayout  # noqa: E402


def unique_bytes(root: Path) -> int:
    """Allocated bytes of every inode under ``root`` once (hard links counted once, not zero)."""
    seen, total = set(), 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            st = os.lstat(os.path.join(dirpath, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def received() -> int:
    """Bytes this machine's network interfaces (loopback aside) have received so far."""
    total = 0
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, data = line.split(":", 1)
        if name.strip() != "lo":
            total += int(data.split()[0])
    return total


def run(args: list[str], work: Path, cache: str = "cache") -> tuple[float, int, dict, str]:
    """(seconds, bytes received meanwhile, the JSON it printed, its stderr)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    cmd = [sys.executable, "-m", "bisector", *args, "--cache-dir", str(work / cache), "--store",
           str(work / f"{cache}.sqlite"), "--json"]
    before, start = received(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
    seconds, got = time.perf_counter() - start, received() - before
    if not proc.stdout.strip():
        raise SystemExit(f"bisector failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return seconds, got, json.loads(proc.stdout), proc.stderr


def releases_between(good: str, bad: str) -> list[str]:
    from bisector.sources.index import list_releases, releases_between as between
    from bisector.sources.installer_config import default_index_url

    return [r.version for r in between(list_releases(default_index_url(), "torch"), good, bad)]


MATRIX = """[matrix]
metrics = ["ga_excess_bytes_per_param"]
pins = {{ accelerate = "1.10.0" }}

[matrix.grid]
torch = {versions}

[probe]
name = "ga_memory"
args = ["--loop=accelerate"]

[criterion]
metric = "ga_excess_bytes_per_param"
threshold = 0.5
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--good", default="2.11")
    parser.add_argument("--bad", default="2.13")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (default: a temp dir)")
    opts = parser.parse_args()
    work = opts.keep or Path(tempfile.mkdtemp(prefix="bisector-torch-axis-"))
    work.mkdir(parents=True, exist_ok=True)
    job = ["run", "--package", "torch", "--good", opts.good, "--bad", opts.bad, "--probe", "ga_memory",
           "--probe-arg=--loop=accelerate", "--with", "accelerate==1.10.0"]
    try:
        cold_s, cold_rx, cold, log = run(job, work)
        cold_bases = len(torch_bases(CacheLayout(work / "cache")))
        ahead_s, ahead_rx, ahead, _ = run([*job, "--prefetch"], work, cache="cache-prefetch")
        ahead_bases = len(torch_bases(CacheLayout(work / "cache-prefetch")))
        shutil.rmtree(work / "cache-prefetch", ignore_errors=True)
        warm_s, warm_rx, warm, _ = run(job, work)
        versions = releases_between(opts.good, opts.bad)
        (work / "matrix.toml").write_text(MATRIX.format(versions=json.dumps(versions)))
        grid_s, grid_rx, grid, grid_log = run(["matrix", "--config", str(work / "matrix.toml"), "--out",
                                               str(work / "matrix-out")], work)
        layout = CacheLayout(work / "cache")
        builds = {}
        for info in (read_info(d) for d in sorted(layout.envs.iterdir())):
            if info and info.target.package == "torch":
                builds[info.target.version] = info.torch
        bases = []
        for prefix in torch_bases(layout):
            marker = read_marker(prefix)
            own, apparent = disk_usage(prefix)
            said = estimate(marker.torch, prefix / "bin" / "python") if marker else None
            bases.append({"torch": marker.torch if marker else prefix.name, "own_bytes": own, "apparent_bytes": apparent,
                          "shared_bytes": marker.shared_bytes if marker else 0,
                          "shared_with": marker.shared_with if marker else [],
                          "index_says": said.total_bytes - said.local_bytes if said else None,
                          "build": said.version if said else None})
        cells = [{"torch": c["versions"].get("torch"), "build": builds.get(c["versions"].get("torch")),
                  "status": c["status"], "value": c["metrics"].get("ga_excess_bytes_per_param"),
                  "reason": c.get("reason")} for c in grid["cells"]]
        report = {"command": "bisector " + " ".join(job), "cold_seconds": round(cold_s, 1),
                  "prefetch_seconds": round(ahead_s, 1), "prefetch_bases_built": ahead_bases,
                  "bases_built": cold_bases,
                  "warm_seconds": round(warm_s, 1), "matrix_seconds": round(grid_s, 1), "status": cold["status"],
                  "received_bytes": {"cold": cold_rx, "prefetch": ahead_rx, "warm": warm_rx, "matrix": grid_rx},
                  "cells": cells,
                  "first_bad": (cold.get("first_bad") or {}).get("ref"),
                  "last_good": (cold.get("last_good") or {}).get("ref"),
                  "steps": [(s["phase"], s["candidate"], s["verdict"], s.get("value")) for s in cold["steps"]],
                  "probes_cold": cold["probes_run"], "probes_warm": warm["probes_run"],
                  "environment_torch": cold["environment"].get("torch"), "bases": bases}
        (work / "torch_axis.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report, indent=1))
        print()
        print(f"| run | seconds | probes | torch bases built | received | answer |\n|---|---:|---:|---:|---:|---|\n"
              f"| bisect, cold (empty caches) | {cold_s:.1f} | {cold['probes_run']} | {report['bases_built']} | "
              f"{human_bytes(cold_rx)} | {cold['status']} {report['first_bad'] or ''} |\n"
              f"| bisect, cold, `--prefetch` | {ahead_s:.1f} | {ahead['probes_run']} | {ahead_bases} | "
              f"{human_bytes(ahead_rx)} | {ahead['status']} |\n"
              f"| bisect, warm (same cache and store) | {warm_s:.1f} | {warm['probes_run']} | 0 | {human_bytes(warm_rx)} | "
              f"{warm['status']} |\n"
              f"| matrix, every release (same cache) | {grid_s:.1f} | {grid.get('probes_run', '?')} | "
              f"{len(bases) - report['bases_built']} | {human_bytes(grid_rx)} | {len(cells)} cells |")
        print("\n| torch | build | status | GA excess B/param |\n|---|---|---|---:|")
        for c in cells:
            value = f"{c['value']:.3f}" if c["value"] is not None else "-"
            print(f"| {c['torch']} | {c['build']} | {c['status']} | {value} |")
        print()
        print("| base | build | index says (download) | own disk | apparent | shared with earlier bases |\n"
              "|---|---|---:|---:|---:|---:|")
        for b in bases:
            said = human_bytes(b["index_says"]) if b["index_says"] is not None else "?"
            print(f"| torch=={b['torch']} | {b['build']} | {said} | {human_bytes(b['own_bytes'])} | "
                  f"{human_bytes(b['apparent_bytes'])} | {human_bytes(b['shared_bytes'])} |")
        stored = unique_bytes(layout.bases) if layout.bases.is_dir() else 0
        apparent = sum(b["apparent_bytes"] for b in bases)
        report["bases_disk_bytes"], report["bases_apparent_bytes"] = stored, apparent
        (work / "torch_axis.json").write_text(json.dumps(report, indent=1))
        print(f"\nbases on disk: {human_bytes(stored)} with shared CUDA libraries, {human_bytes(apparent)} without "
              f"({apparent / max(stored, 1):.2f}x)")
        if cold["status"] != "found":
            print(f"\nthe bisect: {cold.get('reason')}")
        print(f"\nthe bisect's log:\n{log[-3000:]}\nthe matrix's log:\n{grid_log[-2000:]}")
    finally:
        if opts.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
