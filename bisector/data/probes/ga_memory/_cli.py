"""Command line of ga_memory.py and the effective configuration ("spec") it resolves to.

The spec is what the measurement depends on; its canonical JSON plus the probe version hashes
to ``config_hash`` so results from different candidates are only compared like for like.
Output-only options (``--result``, ``--timings``, ``--cell``...) are not part of it.
"""
from __future__ import annotations

import argparse
import hashlib
import json

DEFAULT_SIZES = "64,128,192,256"
PRECISIONS = ("fp32", "bf16", "fp16")
NOT_IN_SPEC = ("result", "timings", "cell", "cell_out", "cell_timeout")
NOT_HASHED = ("isolate", "attribution", "top", "threads")  # change the report or speed, not the bytes


def _ints(text: str):
    return [int(x) for x in text.split(",") if x.strip()]


def _names(text: str):
    return [x.strip() for x in text.split(",") if x.strip()]


def _add_model_args(p):
    p.add_argument("--arch", choices=("gpt_neox", "llama"), default="gpt_neox",
                   help="model family built from a config with random weights (gpt_neox = Pythia-like)")
    p.add_argument("--sizes", type=_ints, default=_ints(DEFAULT_SIZES), help="hidden sizes, comma separated")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=8)
    p.add_argument("--max-positions", type=int, default=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--attn", default="eager",
                   help="attention implementation where transformers accepts one; 'default' = don't pass")
    p.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--use-reentrant", choices=("default", "true", "false"), default="default",
                   help="checkpointing flavour; 'default' = whatever transformers does")


def _add_loop_args(p):
    p.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    p.add_argument("--precisions", type=_names, default=["fp32", "bf16"],
                   help="comma separated of fp32,bf16,fp16 (fp16: CUDA only)")
    p.add_argument("--ga", type=_ints, default=[1, 2], help="gradient accumulation steps to compare")
    p.add_argument("--loop", choices=("accelerate", "trainer"), default="accelerate")
    p.add_argument("--zero-grad-policy", choices=("default", "none", "zeros"), default="default",
                   help="default: optimizer.zero_grad() as real code calls it; none/zeros force set_to_none")
    p.add_argument("--warmup-steps", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)


def _add_run_args(p):
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads on CPU (0 = torch default); tiny models run best on 1")
    p.add_argument("--attribution", action=argparse.BooleanOptionalAction, default=True,
                   help="by-site breakdown of the bytes live at each cell's peak (CPU meter)")
    p.add_argument("--top", type=int, default=12, help="attribution rows kept per cell")
    p.add_argument("--isolate", choices=("auto", "on", "off"), default="auto",
                   help="one subprocess per cell (auto: on for CUDA, off for CPU)")
    p.add_argument("--result", help="result path when $BISECTOR_RESULT is not set")
    p.add_argument("--timings", action="store_true", help="record a time split in the result")
    p.add_argument("--cell", help=argparse.SUPPRESS)
    p.add_argument("--cell-out", help=argparse.SUPPRESS)
    p.add_argument("--cell-timeout", type=float, default=900.0, help=argparse.SUPPRESS)


def parser() -> argparse.ArgumentParser:
    """The probe's argument parser."""
    p = argparse.ArgumentParser(
        prog="ga_memory.py",
        description="Peak memory of a training step: gradient accumulation x precision x width.",
    )
    _add_model_args(p)
    _add_loop_args(p)
    _add_run_args(p)
    return p


def resolve_device(name: str) -> str:
    """'auto' -> 'cuda' when torch sees a GPU, else 'cpu'."""
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _check(spec):
    bad = [x for x in spec["precisions"] if x not in PRECISIONS]
    if bad:
        raise SystemExit(f"unknown precision(s): {bad}")
    if "fp16" in spec["precisions"] and spec["device"] != "cuda":
        raise SystemExit("fp16 needs --device cuda (mixed fp16 on CPU is not supported)")
    if any(h % spec["heads"] for h in spec["sizes"]):
        raise SystemExit(f"every size must be divisible by --heads {spec['heads']}")
    if spec["seq_len"] > spec["max_positions"]:
        raise SystemExit("--seq-len exceeds --max-positions")
    if not spec["sizes"] or not spec["ga"] or not spec["precisions"]:
        raise SystemExit("--sizes, --ga and --precisions must not be empty")


def make_spec(args) -> dict:
    """The effective configuration (device resolved, output-only options dropped)."""
    spec = {k: v for k, v in vars(args).items() if k not in NOT_IN_SPEC}
    spec["device"] = resolve_device(args.device)
    spec["use_reentrant"] = {"default": None, "true": True, "false": False}[args.use_reentrant]
    isolate = args.isolate if args.isolate != "auto" else ("on" if spec["device"] == "cuda" else "off")
    spec["isolate"] = isolate == "on"
    spec["attribution"] = bool(args.attribution and spec["device"] == "cpu")
    _check(spec)
    return spec


def config_hash(spec: dict, version: str) -> str:
    """sha256 of the canonical JSON of the measurement-relevant spec and the probe version."""
    relevant = {k: v for k, v in spec.items() if k not in NOT_HASHED}
    blob = json.dumps({"config": relevant, "probe_version": version}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
