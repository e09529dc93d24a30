"""Command line of ga_memory.py and the effective configuration ("spec") it resolves to.

The spec is what the measurement depends on; its canonical JSON plus the probe version hashes
to ``config_hash`` so results from different candidates are only compared like for like.
Output-only options (``--result``, ``--timings``, ``--cell``...) are not part of it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os

from _models.shapes import FLAG_FIELDS, SHAPES, load_shape

DEFAULT_SIZES = "64,128,192,256"
MODEL_DEFAULTS = {"sizes": [64, 128, 192, 256], "layers": 2, "heads": 4, "vocab": 512, "max_positions": 64}
PROFILES = {
    "default": {},
    "activations": {"seq_lens": [64, 128, 256], "vocab": 8192, "sizes": [64, 128], "max_positions": 256},
    # on a GPU: widths where a per-parameter slope is not the allocator's 512-byte rounding
    "cuda": {"sizes": [1024, 1536, 2048, 2560], "layers": 4, "heads": 16, "vocab": 8192, "max_positions": 256},
}
ATTN = ("eager", "sdpa", "flash", "default")
ARCHS = ("gpt_neox", "llama")
LOOPS = ("accelerate", "trainer")
# What each loop does by itself, as knobs: the accelerate loop is the hand-written loop of
# accelerate's examples; Trainer calls model.zero_grad(), clips at max_grad_norm=1.0 and steps a
# scheduler. Knobs Trainer decides itself cannot be changed in the Trainer loop.
LOOP_KNOBS = {
    "accelerate": {"zero_grad_target": "optimizer", "zero_grad_policy": "default", "max_grad_norm": 0.0,
                   "lr_scheduler": "none", "precision_via": "arg"},
    "trainer": {"zero_grad_target": "model", "zero_grad_policy": "default", "max_grad_norm": 1.0,
                "lr_scheduler": "constant", "precision_via": "arg"},
}
TRAINER_DECIDES = ("zero_grad_target", "zero_grad_policy", "lr_scheduler")
PRECISIONS = ("fp32", "bf16", "fp16")
NOT_IN_SPEC = ("result", "timings", "cell", "cell_out", "cell_timeout", "workers")
# change the report or the speed, not the bytes
NOT_HASHED = ("isolate", "attribution", "top", "threads", "knobs_given", "device_requested", "cuda_reset",
              "alloc_trace")


def _ints(text: str):
    return [int(x) for x in text.split(",") if x.strip()]


def _names(text: str):
    return [x.strip() for x in text.split(",") if x.strip()]


def _add_model_args(p):
    p.add_argument("--arch", default="gpt_neox",
                   help="model family built from a config with random weights (gpt_neox = Pythia-like)")
    p.add_argument("--model-config", default=None, metavar="NAME|config.json",
                   help=f"a model shape: {', '.join(sorted(SHAPES))}, or a transformers config.json "
                        "(random weights; --sizes defaults to its width)")
    p.add_argument("--model-factory", default=None, metavar="MODULE:FUNCTION",
                   help="build the model with your own code: FUNCTION(hidden=, layers=, heads=, vocab=, "
                        "max_positions=, use_cache=) returns a torch module whose forward(input_ids=, labels=) "
                        "result has .loss (imported in the candidate environment)")
    p.add_argument("--profile", choices=sorted(PROFILES), default="default",
                   help="activations: the token axis on, with sizes where activations dominate (large "
                        "vocab, hundreds of tokens), for bisecting activation regressions; cuda: widths "
                        "large enough for per-parameter slopes on a GPU")
    p.add_argument("--sizes", type=_ints, default=None, help=f"hidden sizes, comma separated ({DEFAULT_SIZES})")
    p.add_argument("--layers", type=int, default=None, help="decoder layers (2)")
    p.add_argument("--heads", type=int, default=None, help="attention heads (4)")
    p.add_argument("--vocab", type=int, default=None, help="vocabulary size (512)")
    p.add_argument("--seq-len", type=int, default=8, help="tokens per sample (the seed: 8)")
    p.add_argument("--seq-lens", type=_ints, default=None,
                   help="several sequence lengths: the token axis (fits bytes per token too), e.g. 8,64,256")
    p.add_argument("--max-positions", type=int, default=None, help="max_position_embeddings (64)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--attn", choices=ATTN, default="eager",
                   help="attention implementation (transformers >= 4.36; flash = flash_attention_2); "
                        "'default' = don't pass one")
    p.add_argument("--use-cache", action=argparse.BooleanOptionalAction, default=False,
                   help="keep the KV cache in training forwards (off, as qlora trains)")
    p.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--use-reentrant", choices=("default", "true", "false"), default="default",
                   help="checkpointing flavour; 'default' = whatever transformers does")


def _add_loop_args(p):
    p.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    p.add_argument("--precisions", type=_names, default=["fp32", "bf16"],
                   help="comma separated of fp32,bf16,fp16 (fp16: CUDA only)")
    p.add_argument("--ga", type=_ints, default=[1, 2], help="gradient accumulation steps to compare")
    p.add_argument("--loop", choices=LOOPS, default="accelerate",
                   help="accelerate: a hand-written accelerate loop (the maintainers' script); "
                        "trainer: transformers.Trainer (the reporter's); see --help of the knobs below")
    g = p.add_argument_group("loop knobs", "what makes one training loop differ from another; unset = what "
                             "the loop does by itself (the result's 'knobs' says the effective values)")
    g.add_argument("--zero-grad-target", choices=("optimizer", "model"), default=None,
                   help="optimizer.zero_grad() (accelerate loop default) or model.zero_grad() (what Trainer calls)")
    g.add_argument("--zero-grad-policy", choices=("default", "none", "zeros"), default=None,
                   help="default: the call's own set_to_none default; none/zeros force set_to_none=True/False")
    g.add_argument("--max-grad-norm", type=float, default=None,
                   help="clip the gradient norm before the optimizer step (Trainer's default 1.0; 0 = off)")
    g.add_argument("--lr-scheduler", choices=("none", "constant"), default=None,
                   help="step a (constant) lr scheduler after the optimizer, as Trainer does")
    g.add_argument("--precision-via", choices=("arg", "env"), default=None,
                   help="arg: the loop's own argument (Accelerator(mixed_precision=...) / TrainingArguments"
                        "(bf16=True)); env: ACCELERATE_MIXED_PRECISION, as the seed report set it")
    p.add_argument("--fp16-init-scale", type=float, default=None,
                   help="initial scale of the fp16 GradScaler (accelerate's default 65536); on the CPU it "
                        "also turns a GradScaler on, so skipped fp16 steps can be exercised there")
    p.add_argument("--warmup-steps", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)


def _add_run_args(p):
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: $BISECTOR_DEVICE when the orchestrator sets it, else CUDA when torch sees a GPU")
    p.add_argument("--cuda-memory-fraction", type=float, default=None,
                   help="cap this process's CUDA memory (torch.cuda.set_per_process_memory_fraction), "
                        "e.g. to check that an out-of-memory cell is reported")
    p.add_argument("--cuda-reset", choices=("phase", "window"), default="phase",
                   help="reset the CUDA peak counters at every phase (per-phase peaks) or only at the "
                        "window's start (the cross-check of the step peak)")
    p.add_argument("--fake", action="store_true",
                   help="run every cell on fake tensors (torch's FakeTensorMode: shapes, no memory), the model "
                        "built under it: the same live bytes as a real run, at any size, with nothing allocated "
                        "(meter 'cpu-dispatch (fake)'); a step that reads a tensor's value stops its cell")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads on CPU (0 = torch default); tiny models run best on 1")
    p.add_argument("--attribution", action=argparse.BooleanOptionalAction, default=True,
                   help="by-site breakdown of the bytes live at each cell's peak (CPU meter)")
    p.add_argument("--top", type=int, default=12, help="attribution rows kept per cell")
    _add_allocator_args(p)
    p.add_argument("--isolate", choices=("auto", "on", "off"), default="auto",
                   help="one subprocess per cell (auto: on for CUDA, off for CPU)")
    p.add_argument("--workers", type=int, default=0,
                   help="cells measured in parallel forked processes (0: $BISECTOR_CPUS, else 1), no more than "
                        "the host memory holds (fewer, said so); same bytes")
    p.add_argument("--result", help="result path when $BISECTOR_RESULT is not set")
    p.add_argument("--timings", action="store_true", help="record a time split in the result")
    p.add_argument("--cell", help=argparse.SUPPRESS)
    p.add_argument("--cell-out", help=argparse.SUPPRESS)
    p.add_argument("--cell-timeout", type=float, default=900.0, help=argparse.SUPPRESS)


def _add_allocator_args(p):
    g = p.add_argument_group("allocator model", "on the CPU, each cell's allocation trace is replayed through a "
                             "model of the CUDA caching allocator: estimated reserved bytes (est_reserved_*)")
    g.add_argument("--alloc-conf", default=None, metavar="TEXT",
                   help="the allocator settings the model uses, as PYTORCH_CUDA_ALLOC_CONF spells them, e.g. "
                        "expandable_segments:True (default: $PYTORCH_CUDA_ALLOC_CONF, else torch's defaults)")
    g.add_argument("--alloc-device-gib", type=float, default=None, metavar="GIB",
                   help="the device memory the model assumes (default: unlimited); with --cuda-memory-fraction "
                        "it caps the process as set_per_process_memory_fraction does")
    g.add_argument("--alloc-trace", action="store_true",
                   help="keep each cell's allocation trace in the result (alloc_trace), for replaying elsewhere")


def _resolve_allocator(spec: dict) -> None:
    """``alloc_conf`` from the flag or the environment, checked as torch checks it."""
    from _allocator_model.conf import AllocConfError, conf_from_env, settings_from_spec

    if spec["alloc_conf"] is None:
        spec["alloc_conf"] = conf_from_env(os.environ)
    if spec["alloc_device_gib"] is not None and spec["alloc_device_gib"] <= 0:
        raise SystemExit("--alloc-device-gib must be > 0")
    try:
        settings_from_spec(spec)
    except AllocConfError as exc:
        raise SystemExit(f"--alloc-conf {spec['alloc_conf']!r}: {exc}") from None


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


DEVICE_ENV = "BISECTOR_DEVICE"   # what the orchestrator asks for: the run's device, never guessed


def resolve_device(name: str, fake: bool = False) -> str:
    """'auto' -> $BISECTOR_DEVICE when the orchestrator set it, else 'cuda' when torch sees a GPU,
    else 'cpu'; with ``--fake`` 'cpu' (fake tensors need no device). An explicit device is never
    replaced by another (no silent CPU fallback)."""
    if name != "auto":
        return name
    if fake:
        return "cpu"
    asked = os.environ.get(DEVICE_ENV, "").strip()
    if asked in ("cpu", "cuda"):
        return asked
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _check(spec):
    if not spec["sizes"] or not spec["ga"] or not spec["precisions"]:
        raise SystemExit("--sizes, --ga and --precisions must not be empty")
    if spec.get("model_factory") and (":" not in spec["model_factory"] or spec.get("model_config")):
        raise SystemExit("--model-factory is MODULE:FUNCTION, and replaces --model-config")
    if not spec.get("model_config") and not spec.get("model_factory") and spec["arch"] not in ARCHS:
        raise SystemExit(f"--arch must be one of {', '.join(ARCHS)} (other families: --model-config config.json)")
    bad = [x for x in spec["precisions"] if x not in PRECISIONS]
    if bad:
        raise SystemExit(f"unknown precision(s): {bad}")
    if any(h % spec["heads"] for h in spec["sizes"]):
        raise SystemExit(f"every size must be divisible by --heads {spec['heads']}")
    if max(spec["seq_lens"]) > spec["max_positions"] or min(spec["seq_lens"]) < 1:
        raise SystemExit("every sequence length must be between 1 and --max-positions")
    if spec.get("fake"):
        _check_fake(spec)


def _check_fake(spec):
    """What ``--fake`` cannot do: a real device's memory (CUDA's counters, a memory cap, OOM) is not there."""
    if spec["device"] != "cpu":
        raise SystemExit("--fake runs on fake CPU tensors: drop --device cuda (CUDA's own counters need a GPU)")
    if spec.get("cuda_memory_fraction"):
        raise SystemExit("--fake allocates nothing: --cuda-memory-fraction has no memory to cap")


def resolve_knobs(spec: dict) -> dict:
    """The effective knobs: the loop's own behaviour, overridden where a knob was given."""
    implied = LOOP_KNOBS[spec["loop"]]
    knobs = {k: implied[k] if spec.get(k) is None else spec[k] for k in implied}
    if spec["loop"] == "trainer":
        fixed = [k for k in TRAINER_DECIDES if knobs[k] != implied[k]]
        if fixed:
            flag = "--" + fixed[0].replace("_", "-")
            raise SystemExit(f"{flag} is decided by Trainer itself (it calls model.zero_grad() and steps a "
                             "scheduler); use --loop accelerate to set it")
    if knobs["max_grad_norm"] < 0:
        raise SystemExit("--max-grad-norm must be >= 0 (0 = no clipping)")
    return knobs


def effective_knobs(spec: dict) -> dict:
    """The knobs the cells ran with, and which of them the loop implied rather than was given."""
    implied = LOOP_KNOBS[spec["loop"]]
    return {"loop": spec["loop"], **{k: spec[k] for k in implied},
            "implied_by_loop": sorted(k for k in implied if k not in spec["knobs_given"])}


def resolve_model(spec: dict) -> None:
    """Fill the model fields in place: a flag given wins, then the --model-config shape, then the
    --profile preset, then the defaults. The shape's other fields go to ``spec["shape"]``."""
    shape = load_shape(spec["model_config"]) if spec.get("model_config") else {}
    preset = PROFILES[spec["profile"]]
    from_shape = {flag: shape[field] for field, flag in FLAG_FIELDS.items() if field in shape}
    if "sizes" in from_shape:
        from_shape["sizes"] = [from_shape["sizes"]]
    for name, default in MODEL_DEFAULTS.items():
        if spec.get(name) is None:
            spec[name] = from_shape.get(name, preset.get(name, default))
    spec["seq_lens"] = spec.get("seq_lens") or preset.get("seq_lens") or [spec.pop("seq_len")]
    spec.pop("seq_len", None)
    if shape:
        spec["arch"] = shape["model_type"]
    spec["shape"] = {k: v for k, v in shape.items() if k not in FLAG_FIELDS and k != "model_type"}
    spec["shape_hidden"] = shape.get("hidden_size")


def make_spec(args) -> dict:
    """The effective configuration (device resolved, knobs resolved, output-only options dropped)."""
    spec = {k: v for k, v in vars(args).items() if k not in NOT_IN_SPEC}
    resolve_model(spec)
    spec["knobs_given"] = sorted(k for k in LOOP_KNOBS[spec["loop"]] if spec.get(k) is not None)
    spec.update(resolve_knobs(spec))
    spec["device_requested"] = args.device if args.device != "auto" else os.environ.get(DEVICE_ENV) or "auto"
    spec["device"] = resolve_device(args.device, args.fake)
    spec["use_reentrant"] = {"default": None, "true": True, "false": False}[args.use_reentrant]
    on_gpu = spec["device"] == "cuda" and not args.fake
    isolate = args.isolate if args.isolate != "auto" else ("on" if on_gpu else "off")
    spec["isolate"] = isolate == "on"
    spec["attribution"] = bool(args.attribution and spec["device"] == "cpu")
    _resolve_allocator(spec)
    _check(spec)
    if not spec["fake"]:
        del spec["fake"]   # a real run's configuration (and hash) as before the flag existed
    return spec


def config_hash(spec: dict, version: str) -> str:
    """sha256 of the canonical JSON of the measurement-relevant spec and the probe version."""
    relevant = {k: v for k, v in spec.items() if k not in NOT_HASHED}
    blob = json.dumps({"config": relevant, "probe_version": version}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
