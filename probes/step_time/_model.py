"""The model and the training step the speed probe times: a causal LM from a transformers config with
random weights (never downloaded), a batch of seeded token ids, and one optimizer step (forward with
labels, backward, step, ``zero_grad(set_to_none=True)``), in fp32 or under bf16 autocast."""
from __future__ import annotations

import contextlib

import torch

FFN = {"gpt_neox": lambda h: 4 * h, "llama": lambda h: max(8, 8 * round(h * 8 / 3 / 8))}


def build(spec: dict, device: torch.device):
    """The model (train mode, on ``device``), its optimizer and a seeded batch of token ids."""
    import transformers

    torch.manual_seed(spec["seed"])
    config = transformers.AutoConfig.for_model(
        spec["arch"], hidden_size=spec["hidden"], num_hidden_layers=spec["layers"],
        num_attention_heads=spec["heads"], intermediate_size=FFN[spec["arch"]](spec["hidden"]),
        vocab_size=spec["vocab"], max_position_embeddings=max(spec["seq_len"], 64), use_cache=False,
        tie_word_embeddings=False)
    model = transformers.AutoModelForCausalLM.from_config(config).to(device)
    model.train()
    if spec["optimizer"] == "adamw":
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(spec["seed"] + 1)
    ids = torch.randint(0, spec["vocab"], (spec["batch"], spec["seq_len"]), generator=gen).to(device)
    return model, optimizer, ids


def autocast(precision: str, device: torch.device):
    """bf16: autocast in bfloat16 on the device (fp32 master weights); fp32: nothing."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def train_step(model, optimizer, ids, precision: str, device: torch.device):
    """One optimizer step on the batch; returns the loss tensor (read it outside timed code)."""
    with autocast(precision, device):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


EXPECTED_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


def watch_precision(model) -> dict:
    """The dtype the model's first linear layer computes in, recorded at the first step only (the hook
    then removes itself, so timed steps carry no hook): the proof that a precision ran as named."""
    seen: dict = {}
    first = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))

    def record(module, inputs, output):
        seen["linear_output_dtype"] = str(output.dtype).removeprefix("torch.")
        seen["autocast"] = torch.is_autocast_enabled(output.device.type)
        handle.remove()

    handle = first.register_forward_hook(record)
    return seen


def precision_proved(seen: dict, precision: str) -> bool:
    """Whether the recorded step computed in ``precision`` (bf16: under autocast, in bfloat16)."""
    dtype = str(EXPECTED_DTYPE[precision]).removeprefix("torch.")
    return seen.get("linear_output_dtype") == dtype and seen.get("autocast") == (precision == "bf16")


def n_params(model) -> int:
    """Trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
