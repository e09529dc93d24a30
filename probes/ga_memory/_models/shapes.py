"""Model shapes for ``--model-config``: the seed report's models by name, or a transformers config.json.

A shape fixes the architecture (``model_type``) and every config field; the probe still builds it
from config with random weights, never downloading anything. ``--sizes`` then defaults to the
shape's own width; other widths scale the FFN with it and keep the rest.
"""
from __future__ import annotations

import json
import os

SHAPES = {
    # EleutherAI/pythia-1.4b-deduped, the seed report's smaller repro
    "pythia-1.4b": {"model_type": "gpt_neox", "hidden_size": 2048, "num_hidden_layers": 24,
                    "num_attention_heads": 16, "intermediate_size": 8192, "vocab_size": 50304,
                    "max_position_embeddings": 2048, "rotary_pct": 0.25, "use_parallel_residual": True},
    # huggyllama/llama-7b, the seed report's first model
    "llama-7b": {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                 "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
                 "max_position_embeddings": 2048, "rms_norm_eps": 1e-6},
}
# The fields the probe's own flags set; anything else a shape carries is passed to the config as is.
FLAG_FIELDS = {"hidden_size": "sizes", "num_hidden_layers": "layers", "num_attention_heads": "heads",
               "vocab_size": "vocab", "max_position_embeddings": "max_positions"}
DROPPED = ("architectures", "_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache",
           "tie_word_embeddings", "auto_map", "quantization_config")


def load_shape(name_or_path: str) -> dict:
    """The shape's config fields; SystemExit (one line) when it is neither a known name nor a JSON file."""
    if name_or_path in SHAPES:
        return dict(SHAPES[name_or_path])
    if not os.path.isfile(name_or_path):
        known = ", ".join(sorted(SHAPES))
        raise SystemExit(f"--model-config {name_or_path!r} is neither a known shape ({known}) nor a file")
    try:
        with open(name_or_path) as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--model-config {name_or_path}: not a readable JSON config ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise SystemExit(f"--model-config {name_or_path}: a transformers config.json needs a 'model_type'")
    return {k: v for k, v in data.items() if k not in DROPPED}
