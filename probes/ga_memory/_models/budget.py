"""What a cell needs at least, counted from the spec alone (standard library only): the parameters of
the widest model, the bytes a training step holds per parameter, and the activations the longest
sequence cannot do without. A setting whose floor is beyond the memory this machine has is refused
before anything is built, by the probe and (through ``_preflight.py``) by bisector before a run."""
from __future__ import annotations

# bytes per parameter a training step holds at least: fp32 weights and gradients, 2 more for mixed
# precision's 16-bit copies or accumulation, optimizer state
OPTIMIZER_STATE = {"sgd": 0, "adamw": 8}
STEP_BYTES_PER_PARAM = 4 + 4
MIXED_OR_GA_EXTRA = 2
GIB = 1 << 30


def ffn_size(spec: dict, hidden: int) -> int:
    base = spec["shape"].get("intermediate_size")
    if base:  # a shape: scale its FFN with the width
        return int(round(base * hidden / spec["shape_hidden"]))
    if spec["arch"] == "llama":  # SwiGLU: ~8/3 h, rounded to a multiple of 8 like the real models
        return max(8, 8 * round(hidden * 8 / 3 / 8))
    return 4 * hidden


def rough_params(spec: dict, hidden: int) -> int:
    """An upper-ish estimate of the parameters (attention, FFN, embeddings), without building."""
    per_layer = 4 * hidden * hidden + 3 * hidden * ffn_size(spec, hidden)
    return spec["layers"] * per_layer + 2 * spec["vocab"] * hidden


def fewest_params(spec: dict, hidden: int) -> int:
    """A lower bound of the parameters: attention projections, two FFN matrices, embeddings."""
    per_layer = 4 * hidden * hidden + 2 * hidden * ffn_size(spec, hidden)
    return spec["layers"] * per_layer + 2 * spec["vocab"] * hidden


def mixed_or_ga(spec: dict) -> bool:
    return any(p != "fp32" for p in spec["precisions"]) or max(spec["ga"]) > 1


def bytes_per_param(spec: dict) -> int:
    """Host bytes per parameter the spec's most demanding cell holds: fp32 weights and gradients,
    16-bit copies or the accumulation's extra, optimizer state."""
    return STEP_BYTES_PER_PARAM + (MIXED_OR_GA_EXTRA if mixed_or_ga(spec) else 0) + OPTIMIZER_STATE[spec["optimizer"]]


def activation_floor(spec: dict, hidden: int) -> int:
    """Activations a step at the longest sequence holds at least: the fp32 logits, every layer's input
    (kept for the backward, checkpointed or not) and, with eager attention, one layer's score matrix."""
    batch, seq = spec["batch"], max(spec["seq_lens"])
    logits = batch * seq * spec["vocab"] * 4
    inputs = spec["layers"] * batch * seq * hidden * 4
    scores = batch * spec["heads"] * seq * seq * 4 if spec["attn"] in ("eager", "default") else 0
    return logits + inputs + scores


def floor_problem(spec: dict, available: int, params: int | None = None):
    """Why the widest cell cannot fit in ``available`` bytes even at its floor (or None); ``params``: the
    parameters counted exactly (else their lower bound from the spec)."""
    if spec.get("model_factory"):
        return None  # the user's own model: nothing to count before building it
    hidden = max(spec["sizes"])
    counted = params if params is not None else fewest_params(spec, hidden)
    weights, acts = counted * bytes_per_param(spec), activation_floor(spec, hidden)
    if weights + acts <= available:
        return None
    how = "has" if params is not None else "has at least"
    return (f"the model at width {hidden} {how} {counted:,} parameters ({max(spec['seq_lens'])} tokens): a training "
            f"step needs at least {(weights + acts) / GIB:.1f} GiB ({weights / GIB:.1f} GiB for its fp32 weights and "
            f"gradients{', 16-bit copies or accumulation' if mixed_or_ga(spec) else ''}"
            f"{', optimizer state' if OPTIMIZER_STATE[spec['optimizer']] else ''}, "
            f"{acts / GIB:.1f} GiB of activations), and {available / GIB:.1f} GiB of memory is available: use smaller "
            "--sizes, --layers or --seq-lens (or --device cuda)")


def available_memory():
    """Host memory available now (MemAvailable), or None where /proc/meminfo is missing."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
