"""Causal LMs from configs with random weights (never downloaded), for any transformers >= 4.30.

Version differences are feature-detected, not pinned: ``attn_implementation`` (4.36+),
``gradient_checkpointing_kwargs`` (4.35+). What was actually applied is reported back so the
cell record says how the model was built.
"""
from __future__ import annotations

import inspect

import torch

ARCHS = ("gpt_neox", "llama")


def _ffn_size(arch: str, hidden: int) -> int:
    if arch == "llama":  # SwiGLU: ~8/3 h, rounded to a multiple of 8 like the real models
        return max(8, 8 * round(hidden * 8 / 3 / 8))
    return 4 * hidden


def make_config(arch, hidden, layers, heads, vocab, max_positions):
    """A transformers config for ``arch`` at width ``hidden`` (untied, no KV cache)."""
    import transformers

    cls = {"gpt_neox": transformers.GPTNeoXConfig, "llama": transformers.LlamaConfig}[arch]
    return cls(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=_ffn_size(arch, hidden),
        max_position_embeddings=max_positions,
        use_cache=False,
        tie_word_embeddings=False,
    )


def _instantiate(config, attn):
    """Build from config; ``attn`` names an attention implementation or 'default'."""
    from transformers import AutoModelForCausalLM

    if attn == "default":
        return AutoModelForCausalLM.from_config(config), "default"
    try:
        return AutoModelForCausalLM.from_config(config, attn_implementation=attn), attn
    except TypeError:  # transformers < 4.36: no attn_implementation; eager is the only one
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


def build_model(spec: dict, hidden: int):
    """The cell's model in fp32, train mode, on CPU; returns (model, build facts)."""
    torch.manual_seed(spec["seed"])
    config = make_config(
        spec["arch"], hidden, spec["layers"], spec["heads"], spec["vocab"], spec["max_positions"]
    )
    model, attn = _instantiate(config, spec["attn"])
    model.to(torch.float32)
    model.train()
    facts = {"attn_implementation": attn, "gradient_checkpointing": "off"}
    effective = getattr(model.config, "_attn_implementation", None)
    if effective:
        facts["attn_effective"] = str(effective)
    if spec["gradient_checkpointing"]:
        facts["gradient_checkpointing"] = enable_checkpointing(model, spec["use_reentrant"])
    facts["n_params"] = sum(p.numel() for p in model.parameters())
    return model, facts


def make_batches(spec: dict, n: int, device):
    """``n`` micro-batches of random token ids (labels = inputs, as in causal LM finetuning)."""
    gen = torch.Generator().manual_seed(spec["seed"] + 1)
    shape = (spec["batch"], spec["seq_len"])
    out = []
    for _ in range(n):
        ids = torch.randint(0, spec["vocab"], shape, generator=gen).to(device)
        out.append({"input_ids": ids, "labels": ids.clone()})
    return out
