"""Built-in probe ``step_time``: how long a training step takes, and how many tokens per second.

A causal LM is built from a transformers config with random weights (GPT-NeoX or Llama family), and
for each precision (fp32, bf16 autocast) ``--warmup`` steps run untimed, then ``--steps`` steps are
timed one by one (``perf_counter``; on CUDA with a synchronize at both ends). Metrics: per precision
the median, min and max step seconds and the tokens per second of the median step; ``step_seconds``
and ``tokens_per_second`` are those of the first precision. One sample of a bisect is one run of this
probe: bisect with ``--compare stats --metric step_seconds``.

The result (``step_time/1``) also says what it ran on: threads, CPU model, and on CUDA the GPU and its
clocks where NVML or nvidia-smi can see them. Weights and token ids are seeded by ``--seed``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time

# The helpers are siblings, the shared contract one level up (this package imports nothing of another probe's).
for _path in (os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import torch  # noqa: E402

from _machine import describe  # noqa: E402
from _model import build, n_params, precision_proved, train_step, watch_precision  # noqa: E402
from _probe_contract import write_result  # noqa: E402

NAME, VERSION, SCHEMA = "step_time", "1.1", "step_time/1"


def warm_imports():
    """The warm worker's opt-in (probes/_probe_contract.py): the modules any run imports, once per
    environment (transformers' auto classes and the built-in families' modeling code)."""
    import importlib

    import transformers

    for family in ("gpt_neox", "llama"):
        try:
            importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        except ImportError:
            pass  # a family this release lacks: a run asking for it says so
    transformers.AutoConfig  # noqa: B018 - resolve the lazy attributes now
    transformers.AutoModelForCausalLM  # noqa: B018
    import torch.optim  # noqa: F401


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="step_time", description=__doc__.splitlines()[0])
    p.add_argument("--arch", choices=["gpt_neox", "llama"], default="gpt_neox")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="adamw")
    p.add_argument("--precisions", default="fp32,bf16", help="comma-separated: fp32, bf16")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per precision before the timed ones")
    p.add_argument("--steps", type=int, default=5, help="timed steps per precision")
    p.add_argument("--device", default="auto", help="cpu, cuda, or auto ($BISECTOR_DEVICE, else cuda when present)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (0: torch's default); one thread times most steadily on a shared machine")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--result", help="where to write when BISECTOR_RESULT is unset (else stdout)")
    args = p.parse_args(argv)
    args.precisions = [x.strip() for x in args.precisions.split(",") if x.strip()]
    bad = sorted(set(args.precisions) - {"fp32", "bf16"})
    if bad or not args.precisions:
        p.error(f"--precisions takes fp32 and bf16, not {', '.join(bad) or 'nothing'}")
    if args.hidden % args.heads:
        p.error("--hidden must divide by --heads")
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    return args


def pick_device(name: str) -> torch.device:
    """``auto``: $BISECTOR_DEVICE when the orchestrator set it, else CUDA when torch sees a GPU."""
    if name == "auto":
        name = os.environ.get("BISECTOR_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"step_time: --device {name} asked for, but torch {torch.__version__} sees no CUDA device")
    return torch.device(name)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_precision(spec: dict, precision: str, device: torch.device) -> list[float]:
    """Warm-up steps (discarded), then the seconds of each timed step; the first step's loss goes to
    ``spec["losses"]`` (same seed, same loss: the model and batch are the seeded ones), and the first
    step's proof of its precision to ``spec["precision_proof"]``; a step not in ``precision`` is an error."""
    model, optimizer, ids = build(spec, device)
    seen = watch_precision(model)
    first = None
    for _ in range(spec["warmup"]):
        loss = train_step(model, optimizer, ids, precision, device)
        first = float(loss) if first is None else first
    times = []
    for _ in range(spec["steps"]):
        _sync(device)
        start = time.perf_counter()
        loss = train_step(model, optimizer, ids, precision, device)
        _sync(device)
        times.append(time.perf_counter() - start)
        first = float(loss) if first is None else first
    if not precision_proved(seen, precision):
        raise SystemExit(f"step_time: {precision} not proved: the first linear layer computed in "
                         f"{seen.get('linear_output_dtype')} with autocast {seen.get('autocast')}")
    spec.setdefault("precision_proof", {})[precision] = seen
    spec.setdefault("n_params", n_params(model))
    spec.setdefault("losses", {})[precision] = first
    return times


def metrics_of(times: dict[str, list[float]], tokens: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for prec, ts in times.items():
        median = statistics.median(ts)
        out.update({f"step_seconds.{prec}": median, f"step_seconds_min.{prec}": min(ts),
                    f"step_seconds_max.{prec}": max(ts), f"tokens_per_second.{prec}": tokens / median})
    first = next(iter(times))
    out["step_seconds"], out["tokens_per_second"] = out[f"step_seconds.{first}"], out[f"tokens_per_second.{first}"]
    return out


def versions() -> dict:
    found = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("transformers", "accelerate"):
        try:
            found[name] = __import__(name).__version__
        except Exception:  # not installed, or broken: say so rather than fail the timing
            found[name] = None
    return found


def main(argv=None) -> int:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    config = {k: v for k, v in vars(args).items() if k not in ("result", "device")}
    spec = dict(config)
    times = {prec: time_precision(spec, prec, device) for prec in args.precisions}
    digest = hashlib.sha256((json.dumps(config, sort_keys=True) + VERSION).encode()).hexdigest()[:16]
    result = {"schema_version": SCHEMA, "metrics": metrics_of(times, args.batch * args.seq_len),
              "probe": {"name": NAME, "version": VERSION, "config_hash": digest, "config": config},
              "steps": {prec: ts for prec, ts in times.items()}, "first_loss": spec["losses"], "n_params": spec["n_params"],
              "precision_proof": spec["precision_proof"],
              "tokens_per_step": args.batch * args.seq_len, "versions": versions(), "device": describe(device)}
    write_result(result, args.result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
