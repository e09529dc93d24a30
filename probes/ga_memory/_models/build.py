"""Causal LMs from configs with random weights (never downloaded), for any transformers >= 4.24.

Version differences are feature-detected, not pinned: ``attn_implementation`` (4.36+),
``gradient_checkpointing_kwargs`` (4.35+). What was actually applied is reported back so the
cell record says how the model was built. Models are built on the cell's device (random init of a
seed-scale model on the CPU alone takes minutes), and on the CPU only when they fit in memory.
"""
from __future__ import annotations

import inspect

import torch

from .budget import OPTIMIZER_STATE, bytes_per_param, ffn_size, mixed_or_ga, rough_params

ATTN_NAMES = {"flash": "flash_attention_2"}
# Host bytes a cell needs beyond bytes_per_param (budget.py) per parameter: at pythia-1.4b's shape,
# Trainer, CPU, the bf16 GA=2 cell peaked at 9.86 B/param of live tensors and its process at 13.65 GiB RSS
CELL_OVERHEAD = 256 << 20  # a worker's own Python objects and pages beyond the fork it shares
ALLOCATOR_SLACK = 0.05     # the host allocator's slack over the tensors' bytes


def make_config(spec: dict, hidden: int):
    """A transformers config for the spec's family (or shape) at width ``hidden``: untied
    embeddings, the KV cache as ``--use-cache`` says."""
    import transformers

    fields = {k: v for k, v in spec["shape"].items() if k != "intermediate_size"}
    fields.update(hidden_size=hidden, num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"],
                  intermediate_size=ffn_size(spec, hidden), vocab_size=spec["vocab"],
                  max_position_embeddings=spec["max_positions"], use_cache=spec["use_cache"],
                  tie_word_embeddings=False)
    try:
        return transformers.AutoConfig.for_model(spec["arch"], **fields)
    except (ValueError, KeyError) as exc:  # older releases lack the family (Llama before 4.28)
        raise RuntimeError(f"transformers {transformers.__version__} cannot build {spec['arch']!r}: {exc}") from None


def _instantiate(config, attn):
    """Build from config; ``attn`` names an attention implementation or 'default'."""
    from transformers import AutoModelForCausalLM

    if attn == "default":
        return AutoModelForCausalLM.from_config(config), "default"
    name = ATTN_NAMES.get(attn, attn)
    try:
        return AutoModelForCausalLM.from_config(config, attn_implementation=name), name
    except TypeError:  # transformers < 4.36: no attn_implementation; eager is the only one
        if attn != "eager":
            raise RuntimeError(f"--attn {attn} needs transformers >= 4.36 (attn_implementation)") from None
        return AutoModelForCausalLM.from_config(config), "unsupported (library default)"


def enable_checkpointing(model, use_reentrant) -> str:
    """Turn on gradient checkpointing; returns how (for the record)."""
    fn = model.gradient_checkpointing_enable
    if use_reentrant is None:
        fn()
        return "on (library default)"
    if "gradient_checkpointing_kwargs" not in inspect.signature(fn).parameters:
        raise RuntimeError("use_reentrant requested but gradient_checkpointing_kwargs unsupported")
    fn(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
    return f"on (use_reentrant={use_reentrant})"


def count_params(spec: dict, hidden: int) -> int:
    """Parameters of the model at ``hidden``, counted on the meta device (no memory, no init): one layer and
    two, the rest of the stack by their difference (the layers are alike), so a deep model counts as fast."""
    from transformers import AutoModelForCausalLM

    def count(layers: int) -> int:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(make_config({**spec, "layers": layers}, hidden))
        return sum(p.numel() for p in model.parameters())

    if spec["layers"] <= 2:
        return count(spec["layers"])
    one, two = count(1), count(2)
    return one + (spec["layers"] - 1) * (two - one)


def cell_memory(spec: dict, workers: int = 1, available=None):
    """Host bytes the largest cell needs (None for the user's own model: nothing to count before
    building it). Counted exactly (on the meta device) unless ``workers`` such cells clearly fit in
    ``available`` by the rough count."""
    if spec.get("model_factory"):
        return None
    hidden = max(spec["sizes"])
    rough = _host_bytes(spec, rough_params(spec, hidden))
    if available and rough * workers < available // 2:
        return rough
    return _host_bytes(spec, count_params(spec, hidden))


def _host_bytes(spec: dict, n_params: int) -> int:
    return int(n_params * bytes_per_param(spec) * (1 + ALLOCATOR_SLACK)) + CELL_OVERHEAD


def memory_problem(spec: dict, need: int, available: int):
    """Why the largest cell, needing ``need`` bytes (:func:`cell_memory`), cannot train in
    ``available`` bytes of host memory, or None."""
    if need <= available:
        return None
    hidden, gib = max(spec["sizes"]), 1 << 30
    n = count_params(spec, hidden)
    return (f"the model at width {hidden} has {n:,} parameters: a training step needs about {need / gib:.1f} GiB "
            f"({bytes_per_param(spec)} bytes per parameter: fp32 weights and gradients"
            f"{', 16-bit copies or accumulation' if mixed_or_ga(spec) else ''}"
            f"{', optimizer state' if OPTIMIZER_STATE[spec['optimizer']] else ''}), "
            f"and {available / gib:.1f} GiB of memory is available; use --device cuda or smaller --sizes")


def import_factory_module(name: str):
    """The module of ``--model-factory MODULE:FUNCTION``, found where the user keeps it too: the directory
    bisector was started in and their PYTHONPATH (``$BISECTOR_USER_PATH``), searched after the environment's
    own paths, so nothing of the environment is shadowed."""
    import importlib
    import os
    import sys

    for entry in os.environ.get("BISECTOR_USER_PATH", "").split(os.pathsep):
        if entry and entry not in sys.path:
            sys.path.append(entry)
    return importlib.import_module(name)


def _from_factory(spec: dict, hidden: int):
    """``--model-factory MODULE:FUNCTION``: the user's own model code, imported in the candidate env."""
    module_name, _, function = spec["model_factory"].partition(":")
    factory = getattr(import_factory_module(module_name), function)
    model = factory(hidden=hidden, layers=spec["layers"], heads=spec["heads"], vocab=spec["vocab"],
                    max_positions=spec["max_positions"], use_cache=spec["use_cache"])
    return model, f"{spec['model_factory']} (own forward)"


def _checkpointing(spec, model) -> str:
    if not spec["gradient_checkpointing"]:
        return "off"
    if not hasattr(model, "gradient_checkpointing_enable"):
        return "not supported by this model"
    return enable_checkpointing(model, spec["use_reentrant"])


def build_model(spec: dict, hidden: int):
    """The cell's model in fp32, train mode, built on the cell's device; returns (model, build facts)."""
    torch.manual_seed(spec["seed"])
    with torch.device(spec["device"]):
        if spec.get("model_factory"):
            model, attn = _from_factory(spec, hidden)
        else:
            model, attn = _instantiate(make_config(spec, hidden), spec["attn"])
    model.to(torch.float32)
    model.train()
    facts = {"attn_implementation": attn}
    effective = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if effective:
        facts["attn_effective"] = str(effective)
    facts["gradient_checkpointing"] = _checkpointing(spec, model)
    facts["n_params"] = sum(p.numel() for p in model.parameters())
    return model, facts


def make_batches(spec: dict, n: int, device, seq_len: int):
    """``n`` micro-batches of random token ids (labels = inputs, as in causal LM finetuning)."""
    gen = torch.Generator().manual_seed(spec["seed"] + 1)
    shape = (spec["batch"], seq_len)
    out = []
    for _ in range(n):
        ids = torch.randint(0, spec["vocab"], shape, generator=gen).to(device)
        out.append({"input_ids": ids, "labels": ids.clone()})
    return out
