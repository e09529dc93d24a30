"""The accelerate training loop the probe measures, written as user code writes it.

One *step* = ``ga`` micro-steps, each ``with accelerator.accumulate(model): forward; backward;
optimizer.step(); optimizer.zero_grad()`` (accelerate skips step/zero_grad until the last
micro-step). The meter gets a phase mark before each part: ``m{i}.forward``, ``m{i}.backward``,
``m{i}.step``, ``m{i}.zero_grad``.
"""
from __future__ import annotations

import inspect

import torch

PRECISION_TO_ACCELERATE = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}


def reset_accelerate_state() -> None:
    """Forget accelerate's process-wide singletons so the next Accelerator starts clean."""
    from accelerate import state

    for name, args in (("AcceleratorState", (True,)), ("GradientState", ()), ("PartialState", ())):
        reset = getattr(getattr(state, name, None), "_reset_state", None)
        if reset is None:
            continue
        try:
            reset(*args)
        except TypeError:
            reset()


def make_optimizer(name: str, params):
    """SGD (no momentum: no optimizer state) or AdamW, library defaults otherwise."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    raise ValueError(f"unknown optimizer {name!r}")


def zero_grad(optimizer, policy: str) -> None:
    """``default``: ``zero_grad()`` as real code calls it; ``none``/``zeros`` force set_to_none."""
    if policy == "default":
        optimizer.zero_grad()
    else:
        optimizer.zero_grad(set_to_none=(policy == "none"))


def make_accelerator(precision: str, ga: int, device: str):
    """An Accelerator for the cell, or raise with the reason this version cannot do it."""
    from accelerate import Accelerator

    kwargs = {"mixed_precision": PRECISION_TO_ACCELERATE[precision], "gradient_accumulation_steps": ga}
    if device == "cpu" and "cpu" in inspect.signature(Accelerator.__init__).parameters:
        kwargs["cpu"] = True
    accelerator = Accelerator(**kwargs)
    got = str(getattr(accelerator, "mixed_precision", accelerator.state.mixed_precision))
    if got != kwargs["mixed_precision"]:
        raise RuntimeError(f"accelerate applied mixed_precision={got!r}, asked {kwargs['mixed_precision']!r}")
    return accelerator


def state_tensors(model, optimizer):
    """Everything a step starts with: parameters, their grads, buffers, optimizer state."""
    for p in model.parameters():
        yield p
        yield p.grad
    yield from model.buffers()
    inner = getattr(optimizer, "optimizer", optimizer)
    for per_param in inner.state.values():
        for value in per_param.values():
            yield value


def run_step(ctx, batches, meter) -> None:
    """One optimizer step over ``batches`` (one per micro-step), marking phases on ``meter``."""
    accelerator, model, optimizer = ctx["accelerator"], ctx["model"], ctx["optimizer"]
    for i, batch in enumerate(batches):
        meter.mark(f"m{i}.forward")
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            meter.mark(f"m{i}.backward")
            accelerator.backward(loss)
            meter.mark(f"m{i}.step")
            optimizer.step()
            meter.mark(f"m{i}.zero_grad")
            zero_grad(optimizer, ctx["zero_grad_policy"])
        del loss


class AccelerateLoop:
    """Sets up accelerate for one cell and runs warm-up and measured steps."""

    name = "accelerate"

    def __init__(self, spec, cell, model):
        reset_accelerate_state()
        accelerator = make_accelerator(cell["precision"], cell["ga"], spec["device"])
        optimizer = make_optimizer(spec["optimizer"], model.parameters())
        model, optimizer = accelerator.prepare(model, optimizer)
        self.ctx = {
            "accelerator": accelerator,
            "model": model,
            "optimizer": optimizer,
            "zero_grad_policy": spec["zero_grad_policy"],
        }

    def state_tensors(self):
        """Tensors alive before the first step (for ``meter.track``)."""
        return state_tensors(self.ctx["model"], self.ctx["optimizer"])

    def run(self, batches_per_step, meter, warmup_steps=1):
        """Warm-up step(s), then one measured step inside a fresh meter window."""
        for batches in batches_per_step[:warmup_steps]:
            run_step(self.ctx, batches, meter)
        meter.reset_peak()
        run_step(self.ctx, batches_per_step[warmup_steps], meter)
        meter.mark(None)

    def close(self):
        """Drop references and accelerate's singletons."""
        self.ctx.clear()
        reset_accelerate_state()
