"""The command meter (``bisector run ... -- CMD``): what it costs a training script, and whether its bytes are exact.

1. Cost. An unmodified plain training loop (GPT-NeoX, random weights, SGD, batch 1, 64 tokens, 4 optimizer
   steps) runs three ways side by side, interleaved over ``--rounds`` rounds: plain ``python train.py``,
   under the meter with the tensor meter (``--meter tensors``, the default), and with RSS and timing only
   (``--meter rss``). Printed: each way's median wall time and its ratio to plain, for the pythia-160m shape
   (hidden 768, 12 layers, vocab 50304: 162M parameters) and a tiny model (hidden 64, 2 layers), where the
   interpreter's start and torch's import dominate. Targets (pythia-160m): tensors <= 1.5x, rss <= 1.05x.
   The meter reads each step's numbers by default (loss, gradient norm; ``_numerics.py``): ``tensors, no
   numbers`` (``--numerics off``) is the meter without them, and their cost is printed as tensors against it
   (target <= 1.1x); for pythia-160m also ``tensors + update_norm`` (its 622 MiB of parameters are beyond the
   default 64 MiB copied for ``update_norm``: ``--update-norm-max 4096`` copies them at every step).
2. Exactness. ``ga_memory`` measures the same model (through ``--model-factory``) in the same setting (fp32,
   GA 1, accelerate's loop, SGD, no gradient checkpointing, batch 1, 8 tokens) with its own meter; the plain
   loop under the command meter must give the same step peak, to the byte.

Usage: python bench/command_meter.py [--rounds 2] [--skip-big | --numbers-only]   (CPU; the shared base's torch and
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


def _env(work: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("BISECTOR_RESULT", "PYTHONPATH")}
    return {**env, "BISECTOR_DEVICE": "cpu", "BISECTOR_USER_PATH": str(work), "OMP_NUM_THREADS": "1"}


def timed(argv: list[str], work: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=work, env=_env(work), check=True, capture_output=True, timeout=1800)
    return time.perf_counter() - start


def metered(work: Path, command: list[str], *flags: str) -> dict:
    result = work / "result.json"
    subprocess.run([sys.executable, str(METER), *flags, "--result", str(result), "--", *command], cwd=work,
                   env=_env(work), check=True, capture_output=True, timeout=1800)
    return json.loads(result.read_text())


WAYS = {   # the meter's flags of each way
    "tensors": [],
    "tensors, no numbers": ["--numerics", "off"],
    "tensors + update_norm": ["--update-norm-max", "4096"],
    "rss": ["--meter", "rss"],
}


def cost(work: Path, shape: list[str], rounds: int, label: str, update: bool, numbers_only: bool = False) -> None:
    command = [sys.executable, "train.py", *shape]
    result = work / "r.json"

    def way(flags: list[str]):
        return lambda: timed([sys.executable, str(METER), *flags, "--result", str(result), "--", *command], work)

    ways = {"plain": lambda: timed(command, work),
            **{name: way(flags) for name, flags in WAYS.items() if update or "update_norm" not in name}}
    if numbers_only:
        ways = {k: v for k, v in ways.items() if k.startswith("tensors")}
    seconds: dict[str, list[float]] = {k: [] for k in ways}
    step: dict[str, list[float]] = {k: [] for k in ways if k != "plain"}   # each run's median measured step
    read: dict[str, dict] = {}
    for _ in range(rounds):   # interleaved: a slow moment of the machine hits every way alike
        for name, run in ways.items():
            seconds[name].append(run())
            if name != "plain":
                read[name] = json.loads(result.read_text())
                step[name].append(read[name]["metrics"]["step_seconds"])
    med = {k: statistics.median(v) for k, v in seconds.items()}
    base = med.get("plain")
    print(f"{label}:" + (f" plain {base:.2f} s," if base else "") + ",".join(
        f" {k} {v:.2f} s" + (f" ({v / base:.3f}x)" if base else "") for k, v in med.items() if k != "plain")
        + f"  [{rounds} rounds]")
    off, off_step = med["tensors, no numbers"], statistics.median(step["tensors, no numbers"])

    def own(name: str) -> str:   # the meter's own time reading the numbers, as each measured step records it
        steps = read[name]["steps"][1:]
        spent = statistics.median(s.get("numerics_seconds", 0.0) for s in steps)
        share = statistics.median(s.get("numerics_seconds", 0.0) / s["seconds"] for s in steps)
        return f"its own reading {spent * 1000:.0f} ms a step, {share:.1%} of the step"

    numbers = read["tensors"]["metrics"]
    print(f"  the numbers' cost (loss, grad_norm{', update_norm' if 'update_norm_last' in numbers else ''}): the "
          f"meter with them {med['tensors'] / off:.3f}x its run without them, a measured step "
          f"{statistics.median(step['tensors']):.3f} s against {off_step:.3f} s "
          f"({statistics.median(step['tensors']) / off_step:.3f}x; target <= 1.1x), {own('tensors')}; loss_first "
          f"{numbers.get('loss_first', '-'):.6g}, grad_norm_first {numbers.get('grad_norm_first', '-'):.6g}; "
          f"update_norm_last: {numbers.get('update_norm_last', read['tensors']['absent'].get('update_norm_last'))}")
    if update:
        copied, copied_step = med["tensors + update_norm"], statistics.median(step["tensors + update_norm"])
        print(f"  update_norm on every step (the parameters copied to a memfd and compared): the run "
              f"{copied / off:.3f}x, a measured step {copied_step:.3f} s ({copied_step / off_step:.3f}x) the meter "
              f"without the numbers, {own('tensors + update_norm')} (update_norm_last {read['tensors + update_norm']['metrics'].get('update_norm_last'):.6g})")


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
    p.add_argument("--numbers-only", action="store_true",
                   help="only the numbers' cost on pythia-160m (the tensor meter with, without them, with update_norm)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-meter-") as tmp:
        work = Path(tmp)
        for name, text in (("bench_model.py", MODEL), ("train.py", PLAIN), ("loop.py", ACCELERATE_LOOP)):
            (work / name).write_text(textwrap.dedent(text))
        if args.numbers_only:
            cost(work, ["768", "12", "12", "50304", "64", "4", "2"], args.rounds,
                 "pythia-160m shape (162M params, 4 steps, 64 tokens)", update=True, numbers_only=True)
            return 0
        exactness(work)
        cost(work, ["64", "2", "4", "512", "64", "4"], args.rounds, "tiny (hidden 64, 2 layers): start-up dominates",
             update=False)
        if not args.skip_big:
            cost(work, ["768", "12", "12", "50304", "64", "4", "2"], args.rounds,
                 "pythia-160m shape (162M params, 4 steps, 64 tokens)", update=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
