"""Does the command meter change how a 2-process run ends? Each way, ``--runs`` times, exit codes counted.

One 2-process ``accelerate launch`` run in 19 once aborted on rank 1 at exit under the meter ("terminate called
without an active exception"), after printing the right result. This runs the same training script (accelerate's
``Accelerator`` over gloo on the CPU, DDP, SGD, 3 steps, each rank printing its losses) under ``accelerate launch``
and ``torchrun --nproc_per_node 2``, ending with and without ``destroy_process_group``, plainly and under the meter
(probes/command), interleaved, and prints per way: the exit codes and how often each came, how many runs wrote
"terminate called" to stderr, and how many runs printed other losses than the first plain run of that way.

Usage: python bench/meter_exits.py [--runs 20] [--timeout 300]   (CPU; this interpreter's torch and accelerate)
"""
from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METER = ROOT / "probes" / "command" / "__main__.py"

SCRIPT = """
import os, sys
import torch
from accelerate import Accelerator

accelerator = Accelerator(cpu=True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
rank = accelerator.process_index
for step in range(3):
    scratch = torch.ones(10_000_000, dtype=torch.uint8)
    loss = model(torch.ones(8, 64) * (rank + 1)).square().mean()
    accelerator.backward(loss)
    del scratch
    optimizer.step()
    optimizer.zero_grad()
    os.write(1, f"rank {rank} step {step} loss {loss.item():.6f}\\n".encode())
accelerator.wait_for_everyone()
if sys.argv[1] == "destroy":
    torch.distributed.destroy_process_group()
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def argv(launcher: str, ending: str, script: str) -> list[str]:
    port = str(_port())
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port, script,
                ending]
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines",
            "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", port, script, ending]


def run_once(way: tuple[str, str, str], work: Path, timeout: float) -> dict:
    launcher, ending, metered = way
    command = argv(launcher, ending, str(work / "train.py"))
    if metered == "meter":
        command = [sys.executable, str(METER), "--result", str(work / "result.json"), "--", *command]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BISECTOR_RESULT")}
    env.update({"OMP_NUM_THREADS": "1", "BISECTOR_DEVICE": "cpu"})
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = "timeout", str(exc.stdout or ""), str(exc.stderr or "")
    lines = sorted(line for line in out.splitlines() if line.startswith("rank "))
    ranks = None
    if metered == "meter" and (work / "result.json").exists():
        ranks = len(json.loads((work / "result.json").read_text()).get("ranks", []))
        (work / "result.json").unlink()
    return {"code": code, "losses": lines, "terminate": "terminate called" in err, "seconds": time.perf_counter() - start,
            "tail": err.strip().splitlines()[-1:] if code != 0 else [], "ranks": ranks}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", help="also write every run's outcome here")
    args = ap.parse_args()
    ways = list(itertools.product(["accelerate", "torchrun"], ["destroy", "no-destroy"], ["plain", "meter"]))
    outcomes = collections.defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="bench-exits-") as tmp:
        work = Path(tmp)
        (work / "train.py").write_text(SCRIPT)
        for i in range(args.runs):
            for way in ways:
                outcomes[way].append(run_once(way, work, args.timeout))
            print(f"round {i + 1}/{args.runs} done", file=sys.stderr, flush=True)
    print(f"{'launcher':<11} {'ending':<11} {'way':<6} {'runs':>4}  exit codes (count)       terminate  other losses  "
          "median s  2 ranks measured")
    for way in ways:
        runs = outcomes[way]
        reference = outcomes[(way[0], way[1], "plain")][0]["losses"]
        codes = collections.Counter(str(r["code"]) for r in runs)
        shown = ", ".join(f"{c}: {n}" for c, n in sorted(codes.items()))
        other = sum(r["losses"] != reference for r in runs)
        seconds = sorted(r["seconds"] for r in runs)[len(runs) // 2]
        print(f"{way[0]:<11} {way[1]:<11} {way[2]:<6} {len(runs):>4}  {shown:<24} {sum(r['terminate'] for r in runs):>9}  "
              f"{other:>12}  {seconds:8.1f}  {sum(r['ranks'] == 2 for r in runs) if way[2] == 'meter' else '-':>16}")
        for r in runs:
            if r["tail"]:
                print(f"    exit {r['code']}: {r['tail'][0][:160]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"/".join(k): v for k, v in outcomes.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
