"""The command meter (``bisector run ... -- CMD``): what it costs a training script, and whether its bytes are exact.

1. Cost. An unmodified plain training loop (GPT-NeoX, random weights, SGD, batch 1, 64 tokens, 4 optimizer
   steps) runs three ways side by side, interleaved over ``--rounds`` rounds: plain ``python train.py``,
   under the meter with the tensor meter (``--meter tensors``, the default), and with RSS and timing only
   (``--meter rss``). Printed: each way's median wall time and its ratio to plain, for the pythia-160m shape
   (hidden 768, 12 layers, vocab 50304: 162M parameters) and a tiny model (hidden 64, 2 layers), where the
   interpreter's start and torch's import dominate. Targets (pythia-160m): tensors <= 1.5x, rss <= 1.05x.
2. Exactness. ``ga_memory`` measures the same model (through ``--model-factory``) in the same setting (fp32,
   GA 1, accelerate's loop, SGD, no gradient checkpointing, batch 1, 8 tokens) with its own meter; the plain
   loop under the command meter must give the same step peak, to the byte.

3. The sites' own cost: the meter's count with and without the allocation sites of each peak (storages of 1 MiB
   and more placed), on the same loop in one process, interleaved, the least CPU time of each over its rounds.
   Target: about 1.1x at most.

4. The numbers' cost (``--numbers-only``): the meter reads each step's numbers by default (loss, gradient norm;
   ``_numerics.py``): ``tensors, no numbers`` (``--numerics off``) is the meter without them, and their cost is
   printed as tensors against it (target <= 1.1x), with ``tensors + update_norm`` (pythia-160m's 622 MiB of
   parameters are beyond the default 64 MiB copied for ``update_norm``: ``--update-norm-max 4096`` copies them
   at every step).

``--before REF`` adds the meter as it was at a git commit (``tensors before``) and prints ``tensors now /
tensors before``: the cost of placing allocation sites (the meter's default: storages of 1 MiB and more) is
held to about 1.1x of the meter without them; ``tensors, sites from 64 KiB`` shows the cost of a lower floor.

Usage: python bench/command_meter.py [--rounds 2] [--skip-big] [--skip-tiny] [--before REF] [--numbers-only]
(CPU; the shared base's torch and
transformers / accelerate of this interpreter; nothing is installed)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METER, GA_MEMORY = ROOT / "probes" / "command" / "__main__.py", ROOT / "probes" / "ga_memory" / "__main__.py"

MODEL = """
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM


def build(hidden, layers, heads, vocab, max_positions, use_cache=False, intermediate=None):
    config = GPTNeoXConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                           intermediate_size=intermediate or 4 * hidden, vocab_size=vocab,
                           max_position_embeddings=max_positions, use_cache=use_cache)
    config._attn_implementation = "eager"
    return GPTNeoXForCausalLM(config)
"""

PLAIN = """
import sys
import torch
from bench_model import build

hidden, layers, heads, vocab, seq, steps = (int(a) for a in sys.argv[1:7])
torch.manual_seed(0)
torch.set_num_threads(int(sys.argv[7]) if len(sys.argv) > 7 else 1)
model = build(hidden, layers, heads, vocab, max(64, seq))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(steps):
    ids = torch.randint(0, vocab, (1, seq))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(f"loss {loss.item():.4f}")
"""

ACCELERATE_LOOP = """
import sys
import torch
from accelerate import Accelerator
from bench_model import build

hidden, layers, heads, vocab, seq = (int(a) for a in sys.argv[1:6])
torch.manual_seed(0)
torch.set_num_threads(1)
accelerator = Accelerator(mixed_precision="no", gradient_accumulation_steps=1, cpu=True)
model = build(hidden, layers, heads, vocab, 64)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
model, optimizer = accelerator.prepare(model, optimizer)
batches = []   # as ga_memory makes them: before the loop, labels a copy of the ids (one warm-up step, one measured)
for step in range(2):
    ids = torch.randint(0, vocab, (1, seq))
    batches.append({"input_ids": ids, "labels": ids.clone()})
for batch in batches:
    with accelerator.accumulate(model):
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
"""


# the meter's count without and with the allocation sites, in one process, interleaved: only the per-op cost differs
SITES_AB = """
import statistics, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/command"]
import torch
import _parts
from _meters.site_bytes import SiteBytes
from _meters.sites import SitePicker
from _meters.tensor_bytes import LiveBytes
from _package_dirs import package_dirs
from bench_model import build

hidden, layers, heads, vocab, seq, steps, rounds = (int(a) for a in sys.argv[2:9])
torch.manual_seed(0)
torch.set_num_threads(1)
model = build(hidden, layers, heads, vocab, max(64, seq))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
picker = SitePicker(package_dirs("transformers"), [sys.argv[1]])


def train():
    for _ in range(steps):
        ids = torch.randint(0, vocab, (1, seq))
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def timed(make):
    counter = make()
    start = time.process_time()
    with counter:
        train()
        counter.reset_window()
    counter._live.close()
    return time.process_time() - start


ways = {"count only (before)": lambda: _parts._shared(LiveBytes)("cpu"),
        "count and sites (now)": lambda: _parts._shared(SiteBytes)("cpu", picker=picker)}
seconds = {k: [] for k in ways}
train()
for _ in range(rounds):
    for name, make in ways.items():
        seconds[name].append(timed(make))
low = {k: min(v) for k, v in seconds.items()}
print(", ".join(f"{k} {v:.3f} s" for k, v in low.items()) +
      f": sites / count {low['count and sites (now)'] / low['count only (before)']:.3f}x (CPU, least of {rounds})")
"""


def site_cost(work: Path, shape: list[str], label: str) -> None:
    """The sites' own cost, in one process (the least CPU time of each way over its rounds: what other work on the
    machine adds is never less)."""
    done = subprocess.run([sys.executable, "sites_ab.py", str(ROOT / "probes"), *shape], cwd=work, env=_env(work),
                          check=True, capture_output=True, text=True, timeout=3600)
    print(f"{label}, in one process: {done.stdout.strip()}")


def _env(work: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("BISECTOR_RESULT", "PYTHONPATH")}
    return {**env, "BISECTOR_DEVICE": "cpu", "BISECTOR_USER_PATH": str(work), "OMP_NUM_THREADS": "1",
            "BISECTOR_PACKAGE": "transformers"}   # as a bisect of transformers sets it: its frames place the sites


def timed(argv: list[str], work: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and all it started): the CPU time is what a loaded machine
    disturbs least, when other work shares its cores."""
    import resource

    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(argv, cwd=work, env=_env(work), check=True, capture_output=True, timeout=1800)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def metered(work: Path, command: list[str], *flags: str) -> dict:
    result = work / "result.json"
    subprocess.run([sys.executable, str(METER), *flags, "--result", str(result), "--", *command], cwd=work,
                   env=_env(work), check=True, capture_output=True, timeout=1800)
    return json.loads(result.read_text())


def cost(work: Path, shape: list[str], rounds: int, label: str, before: Path | None = None) -> None:
    command = [sys.executable, "train.py", *shape]
    ways = {"plain": lambda: timed(command, work),
            "tensors": lambda: timed([sys.executable, str(METER), "--result", str(work / "r.json"), "--", *command],
                                     work),
            "tensors, sites from 64 KiB": lambda: timed([sys.executable, str(METER), "--site-min-bytes", "65536",
                                                         "--result", str(work / "r.json"), "--", *command], work),
            "rss": lambda: timed([sys.executable, str(METER), "--meter", "rss", "--result", str(work / "r.json"),
                                  "--", *command], work)}
    if before is not None:   # the meter as it was at another commit, side by side
        ways["tensors before"] = lambda: timed([sys.executable, str(before / "command" / "__main__.py"), "--result",
                                                str(work / "r.json"), "--", *command], work)
    seconds: dict[str, list[float]] = {k: [] for k in ways}
    cpu: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(rounds):   # interleaved: a slow moment of the machine hits every way alike
        for name, run in ways.items():
            wall, used = run()
            seconds[name].append(wall)
            cpu[name].append(used)
    for what, table in (("wall", seconds), ("CPU", cpu)):
        base = statistics.median(table["plain"])
        print(f"{label}, {what}: plain {base:.2f} s" + "".join(
            f", {k} {statistics.median(v):.2f} s ({statistics.median(v) / base:.3f}x)" for k, v in table.items()
            if k != "plain") + f"  [{rounds} rounds]")
        if before is not None:
            ratio = statistics.median(table["tensors"]) / statistics.median(table["tensors before"])
            print(f"  {what}: tensors now / tensors before: {ratio:.3f}x")


NUMBER_WAYS = {   # the meter's flags of each way, for the numbers' cost
    "tensors": [],
    "tensors, no numbers": ["--numerics", "off"],
    "tensors + update_norm": ["--update-norm-max", "4096"],
}


def numbers_cost(work: Path, shape: list[str], rounds: int, label: str) -> None:
    """The meter with its reading of each step's numbers against the meter without it (and with update_norm on
    every step), interleaved; each way's median wall time and measured step, and the meter's own reading time."""
    command, result = [sys.executable, "train.py", *shape], work / "r.json"
    seconds: dict[str, list[float]] = {k: [] for k in NUMBER_WAYS}
    step: dict[str, list[float]] = {k: [] for k in NUMBER_WAYS}   # each run's median measured step
    read: dict[str, dict] = {}
    for _ in range(rounds):   # interleaved: a slow moment of the machine hits every way alike
        for name, flags in NUMBER_WAYS.items():
            seconds[name].append(timed([sys.executable, str(METER), *flags, "--result", str(result), "--", *command],
                                       work)[0])
            read[name] = json.loads(result.read_text())
            step[name].append(read[name]["metrics"]["step_seconds"])
    med = {k: statistics.median(v) for k, v in seconds.items()}
    print(f"{label}:" + ",".join(f" {k} {v:.2f} s" for k, v in med.items()) + f"  [{rounds} rounds]")
    off, off_step = med["tensors, no numbers"], statistics.median(step["tensors, no numbers"])

    def own(name: str) -> str:   # the meter's own time reading the numbers, as each measured step records it
        steps = read[name]["steps"][1:]
        spent = statistics.median(s.get("numerics_seconds", 0.0) for s in steps)
        share = statistics.median(s.get("numerics_seconds", 0.0) / s["seconds"] for s in steps)
        return f"its own reading {spent * 1000:.0f} ms a step, {share:.1%} of the step"

    numbers = read["tensors"]["metrics"]
    print(f"  the numbers' cost (loss, grad_norm): the meter with them {med['tensors'] / off:.3f}x its run without "
          f"them, a measured step {statistics.median(step['tensors']):.3f} s against {off_step:.3f} s "
          f"({statistics.median(step['tensors']) / off_step:.3f}x; target <= 1.1x), {own('tensors')}; loss_first "
          f"{numbers.get('loss_first', float('nan')):.6g}, grad_norm_first "
          f"{numbers.get('grad_norm_first', float('nan')):.6g}")
    copied, copied_step = med["tensors + update_norm"], statistics.median(step["tensors + update_norm"])
    print(f"  update_norm on every step (the parameters copied to a memfd and compared): the run {copied / off:.3f}x, "
          f"a measured step {copied_step:.3f} s ({copied_step / off_step:.3f}x) the meter without the numbers, "
          f"{own('tensors + update_norm')} (update_norm_last "
          f"{read['tensors + update_norm']['metrics'].get('update_norm_last', float('nan')):.6g})")


def checkout_probes(ref: str, into: Path) -> Path:
    """probes/ as it was at ``ref`` (git archive of this checkout), for the side-by-side cost."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "probes"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "probes"


def exactness(work: Path) -> None:
    hidden, layers, heads, vocab, seq = "256", "2", "4", "512", "8"
    out = work / "ga.json"
    subprocess.run([sys.executable, str(GA_MEMORY), "--model-factory", "bench_model:build", "--sizes", hidden,
                    "--layers", layers, "--heads", heads, "--vocab", vocab, "--seq-len", seq, "--precisions", "fp32",
                    "--ga", "1", "--loop", "accelerate", "--optimizer", "sgd", "--no-gradient-checkpointing",
                    "--device", "cpu", "--workers", "1", "--no-attribution", "--result", str(out)],
                   cwd=work, env={**_env(work), "BISECTOR_RESULT": str(out)}, check=True, capture_output=True,
                   timeout=1800)
    ga = json.loads(out.read_text())["metrics"][f"peak_bytes.fp32.ga1.h{hidden}"]
    r = metered(work, [sys.executable, "loop.py", hidden, layers, heads, vocab, seq])
    ours = r["metrics"]["step_peak_bytes"]
    verdict = "the same bytes" if ours == ga else f"differ by {ours - ga:+.0f} B"
    print(f"exactness (GPT-NeoX h{hidden}, fp32, GA 1, accelerate loop, SGD): ga_memory {ga:.0f} B, "
          f"command meter {ours:.0f} B: {verdict}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--skip-big", action="store_true", help="leave out the pythia-160m shape")
    p.add_argument("--skip-tiny", action="store_true", help="leave out the tiny shape")
    p.add_argument("--before", metavar="REF", help="also run the meter as it was at this git commit (side by side)")
    p.add_argument("--numbers-only", action="store_true",
                   help="only the numbers' cost on pythia-160m (the tensor meter with, without them, with update_norm)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-meter-") as tmp:
        work = Path(tmp)
        for name, text in (("bench_model.py", MODEL), ("train.py", PLAIN), ("loop.py", ACCELERATE_LOOP),
                           ("sites_ab.py", SITES_AB)):
            (work / name).write_text(textwrap.dedent(text))
        if args.numbers_only:
            numbers_cost(work, ["768", "12", "12", "50304", "64", "4", "2"], args.rounds,
                         "pythia-160m shape (162M params, 4 steps, 64 tokens)")
            return 0
        before = checkout_probes(args.before, work) if args.before else None
        exactness(work)
        site_cost(work, ["64", "2", "4", "512", "64", "20", "7"], "sites' cost, tiny (hidden 64, 2 layers, 20 steps)")
        if not args.skip_big:
            site_cost(work, ["768", "12", "12", "50304", "64", "2", "5"],
                      "sites' cost, pythia-160m shape (2 steps)")
        if not args.skip_tiny:
            cost(work, ["64", "2", "4", "512", "64", "4"], args.rounds, "tiny (hidden 64, 2 layers): start-up dominates",
                 before)
        if not args.skip_big:
            cost(work, ["768", "12", "12", "50304", "64", "4", "2"], args.rounds,
                 "pythia-160m shape (162M params, 4 steps, 64 tokens)", before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
