"""What the probe's newer eyes cost: the ga_memory probe of today against the probe as it was at an
earlier revision (default: e122d7a, probe 1.0, before per-phase sites, the precision proof and the
token axis), and today's probe with the token axis and the activations profile, side by side.

    python bench/probe_cost.py [--python PATH] [--rounds 3] [--baseline-rev REV]

Every variant runs ``--rounds`` times, interleaved (A B C ... A B C ...) so a drift of the machine
hits them all alike; the table gives each variant's median wall time and its ratio to the baseline.
The probe of the older revision is taken from git (``git archive``) into a temporary directory.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOW = os.path.join(ROOT, "probes", "ga_memory", "__main__.py")
OLD_PATHS = ("bisector/data/probes", "probes")   # where the probe lived at older revisions


def old_probe(rev: str, into: str) -> str:
    """The ga_memory entry point of revision ``rev``, extracted under ``into``."""
    for path in OLD_PATHS:
        archive = subprocess.run(["git", "-C", ROOT, "archive", rev, path], capture_output=True)
        if archive.returncode == 0:
            subprocess.run(["tar", "-x", "-C", into], input=archive.stdout, check=True)
            for entry in (os.path.join(into, path, "ga_memory", "__main__.py"), os.path.join(into, path, "ga_memory.py")):
                if os.path.exists(entry):
                    return entry
    sys.exit(f"no ga_memory probe at revision {rev}")


def run_once(python: str, script: str, args: list[str]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        start = time.perf_counter()
        proc = subprocess.run([python, script, "--device", "cpu", *args], env={**os.environ, "BISECTOR_RESULT": out},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit(f"{script} {args} failed:\n{proc.stderr[-2000:]}")
        json.load(open(out))
        return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline-rev", default="e122d7a")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = old_probe(args.baseline_rev, tmp)
        variants = [
            (f"probe 1.0 ({args.baseline_rev}): step peaks, sites at the step's peak", old, []),
            ("today, default: + precision proof, per-phase peaks, fits and sites", NOW, ["--workers", "1"]),
            ("today, default, cells in 2 forked workers", NOW, ["--workers", "2"]),
            ("today, --no-attribution", NOW, ["--workers", "1", "--no-attribution"]),
            ("today, token axis --seq-lens 8,64,256", NOW, ["--workers", "1", "--seq-lens", "8,64,256",
                                                           "--max-positions", "256"]),
            ("today, --profile activations", NOW, ["--workers", "1", "--profile", "activations"]),
        ]
        times: dict[str, list[float]] = {name: [] for name, _, _ in variants}
        for _ in range(args.rounds):
            for name, script, extra in variants:
                times[name].append(run_once(args.python, script, extra))
    base = statistics.median(times[variants[0][0]])
    width = max(len(name) for name in times)
    print(f"{'variant':<{width}}  {'median s':>9}  {'vs 1.0':>7}  (runs)")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:<{width}}  {med:9.2f}  {med / base:6.2f}x  ({', '.join(f'{v:.1f}' for v in values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
