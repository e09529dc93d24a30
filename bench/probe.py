"""Where does one ga_memory probe run spend its time?

Runs the ga_memory probe with ``--timings`` (extra arguments are passed through) as the orchestrator
does, with $BISECTOR_RESULT set, and prints the split: interpreter start, ML-stack imports,
model builds, cell setup, metered steps, the rest inside the script, and process exit, with
each part's share of the wall time measured from outside.

    python bench/probe.py [--python PATH] [probe args...]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "probes", "ga_memory", "__main__.py")
ROWS = [
    ("interpreter start", "interpreter_start_s"),
    ("imports (torch, accelerate, transformers)", "imports_s"),
    ("model build", "model_build_s"),
    ("cell setup (accelerator, optimizer, meter)", "cell_setup_s"),
    ("steps (warm-up + measured, metered)", "steps_s"),
    ("cell subprocesses (isolated mode)", "cell_processes_s"),
    ("failed cells", "failed_cells_s"),
    ("other in script (fit, result, ...)", "other_s"),
]
NESTED = ("model_build_s", "cell_setup_s", "steps_s", "failed_cells_s")


def run(python, probe_args):
    """Run the probe once; returns (wall seconds, launch epoch, result dict)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        env = {**os.environ, "BISECTOR_RESULT": out}
        launched = time.time()
        start = time.perf_counter()
        proc = subprocess.run([python, SCRIPT, "--timings", *probe_args], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - start
        if proc.returncode not in (0, 3) or not os.path.exists(out):
            sys.exit(f"probe failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        with open(out) as fh:
            return wall, launched, json.load(fh)


def split(wall, launched, timings):
    """Rows (label, seconds) summing to the external wall time."""
    parts = dict(timings)
    if "interpreter_start_s" not in parts:  # no /proc: measure from the launch instead
        parts["interpreter_start_s"] = max(0.0, timings["script_start_epoch"] - launched)
    isolated = "cell_processes_s" in parts  # the children's parts are inside that row
    rows = []
    for label, key in ROWS:
        if parts.get(key) and not (isolated and key in NESTED):
            rows.append((label, parts[key]))
        if isolated and key == "cell_processes_s":
            rows += [(f"  of which: {sub}", parts[k]) for sub, k in ROWS if k in NESTED and parts.get(k)]
    inside = parts["interpreter_start_s"] + timings["script_total_s"]
    rows.append(("process exit and launch overhead", max(0.0, wall - inside)))
    return rows


def table(rows, wall):
    """The split as a text table with shares of ``wall``."""
    width = max(len(label) for label, _ in rows)
    lines = [f"{'part':<{width}}  {'seconds':>8}  {'share':>6}"]
    lines += [f"{label:<{width}}  {sec:8.3f}  {sec / wall:6.1%}" for label, sec in rows]
    lines.append(f"{'total (wall, measured outside)':<{width}}  {wall:8.3f}  {1:6.1%}")
    if any(label.startswith("  of which") for label, _ in rows):
        lines.append("('of which' rows are parts of 'cell subprocesses', not added again)")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Parse ``--python``, pass the rest to the probe, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="interpreter of the candidate environment")
    args, probe_args = ap.parse_known_args(argv)
    wall, launched, result = run(args.python, probe_args)
    print(f"probe {result['probe']['name']} {result['probe']['version']} with {result.get('versions')}")
    print(f"{len(result.get('cells', []))} cells, meter {result.get('meter')}\n")
    print(table(split(wall, launched, result["timings"]), wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
