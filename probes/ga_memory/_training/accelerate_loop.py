"""The accelerate training loop the probe measures, written as user code writes it.

One *step* = ``ga`` micro-steps, each ``with accelerator.accumulate(model): forward; backward;
[clip]; optimizer.step(); [scheduler.step()]; zero_grad`` (accelerate skips step/zero_grad until
the last micro-step). The meter gets a phase mark before each part: ``m{i}.forward``,
``m{i}.backward``, ``m{i}.step`` (clipping, optimizer and scheduler), ``m{i}.zero_grad``.

The knobs (``zero_grad_target``, ``zero_grad_policy``, ``max_grad_norm``, ``lr_scheduler``,
``precision_via``) turn the same loop into what ``transformers.Trainer`` does, one behaviour at
a time, so a difference between the two loops can be pinned on one of them.
"""
from __future__ import annotations

import inspect
import os

import torch

PRECISION_TO_ACCELERATE = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}
PRECISION_ENV = "ACCELERATE_MIXED_PRECISION"
MAX_SKIPPED_WARMUPS = 8   # fp16: extra warm-up steps while the GradScaler skips (finds its scale)


class SkippedStep(RuntimeError):
    """The fp16 GradScaler skipped the measured step: AdamW would create its state inside it."""


def step_was_skipped(accelerator) -> bool:
    """Whether the last optimizer step was skipped (fp16 overflow); False where accelerate cannot say."""
    return bool(getattr(accelerator, "optimizer_step_was_skipped", False))


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


def zero_grad(target, policy: str) -> None:
    """``default``: ``target.zero_grad()`` as real code calls it; ``none``/``zeros`` force set_to_none."""
    if policy == "default":
        target.zero_grad()
    else:
        target.zero_grad(set_to_none=(policy == "none"))


def _scaler_kwargs(precision: str, device: str, init_scale):
    """accelerate's GradScaler settings for an fp16 cell on CUDA with a chosen initial scale."""
    if precision != "fp16" or init_scale is None or device != "cuda":
        return {}
    from accelerate.utils import GradScalerKwargs

    return {"kwargs_handlers": [GradScalerKwargs(init_scale=init_scale)]}


def _cpu_scaler(accelerator, precision: str, device: str, init_scale) -> None:
    """On the CPU accelerate runs fp16 without a GradScaler; with --fp16-init-scale the cell gets a
    real one (torch.amp.GradScaler("cpu")), before prepare() hands it to the optimizer."""
    if precision == "fp16" and device == "cpu" and init_scale is not None and accelerator.scaler is None:
        accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)


def make_accelerator(precision: str, ga: int, device: str, via: str = "arg", init_scale=None):
    """An Accelerator for the cell, or raise with the reason this version cannot do it.

    ``via="env"`` leaves ``mixed_precision`` out of the constructor and sets
    ``ACCELERATE_MIXED_PRECISION`` instead (the cell restores the environment afterwards).
    """
    from accelerate import Accelerator

    wanted = PRECISION_TO_ACCELERATE[precision]
    kwargs = {"gradient_accumulation_steps": ga, **_scaler_kwargs(precision, device, init_scale)}
    if via == "env":
        os.environ[PRECISION_ENV] = wanted
    else:
        kwargs["mixed_precision"] = wanted
    if device == "cpu" and "cpu" in inspect.signature(Accelerator.__init__).parameters:
        kwargs["cpu"] = True
    accelerator = Accelerator(**kwargs)
    got = str(getattr(accelerator, "mixed_precision", accelerator.state.mixed_precision))
    if got != wanted:
        raise RuntimeError(f"accelerate applied mixed_precision={got!r}, asked {wanted!r} (via {via})")
    _cpu_scaler(accelerator, precision, device, init_scale)
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


def grads_state(model) -> str:
    """How the gradients stand right now: 'none' (all None), 'kept' (all allocated) or 'mixed'."""
    have = [p.grad is not None for p in model.parameters() if p.requires_grad]
    if not any(have):
        return "none"
    return "kept" if all(have) else "mixed"


def _optimizer_part(ctx) -> None:
    """Clipping (when on and gradients sync now), the optimizer step, the scheduler step."""
    accelerator, model = ctx["accelerator"], ctx["model"]
    if ctx["max_grad_norm"] > 0 and accelerator.sync_gradients:
        accelerator.clip_grad_norm_(model.parameters(), ctx["max_grad_norm"])
    ctx["optimizer"].step()
    if ctx["scheduler"] is not None:
        ctx["scheduler"].step()


def run_step(ctx, batches, meter) -> None:
    """One optimizer step over ``batches`` (one per micro-step), marking phases on ``meter``."""
    accelerator, model = ctx["accelerator"], ctx["model"]
    target = model if ctx["zero_grad_target"] == "model" else ctx["optimizer"]
    for i, batch in enumerate(batches):
        meter.mark(f"m{i}.forward")
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            meter.mark(f"m{i}.backward")
            accelerator.backward(loss)
            meter.mark(f"m{i}.step")
            _optimizer_part(ctx)
            meter.mark(f"m{i}.zero_grad")
            if target is ctx["optimizer"] or accelerator.sync_gradients:
                zero_grad(target, ctx["zero_grad_policy"])  # model.zero_grad() only at a real step
        del loss


class AccelerateLoop:
    """Sets up accelerate for one cell and runs warm-up and measured steps."""

    name = "accelerate"

    def __init__(self, spec, cell, model, fake=None):
        """``fake``: the cell's fake mode (``_meters.fake_mode.FakeSession``) or None; this loop's batches
        come in as they are, so it needs nothing of it."""
        reset_accelerate_state()
        accelerator = make_accelerator(cell["precision"], cell["ga"], spec["device"], spec["precision_via"],
                                       spec.get("fp16_init_scale"))
        optimizer = make_optimizer(spec["optimizer"], model.parameters())
        scheduler = None
        if spec["lr_scheduler"] == "constant":
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
            model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
        else:
            model, optimizer = accelerator.prepare(model, optimizer)
        self.ctx = {key: spec[key] for key in ("zero_grad_target", "zero_grad_policy", "max_grad_norm")}
        self.ctx.update(accelerator=accelerator, model=model, optimizer=optimizer, scheduler=scheduler)
        self.grads_at_step_start = None
        self.skipped_steps = 0

    def state_tensors(self):
        """Tensors alive before the first step (for ``meter.track``)."""
        return state_tensors(self.ctx["model"], self.ctx["optimizer"])

    def _warm_up(self, batches_per_step, meter, warmup_steps):
        """``warmup_steps`` optimizer steps that were not skipped; a skipped one (fp16 overflow while
        the GradScaler finds its scale) is repeated, up to MAX_SKIPPED_WARMUPS times."""
        done = 0
        while done < warmup_steps:
            run_step(self.ctx, batches_per_step[done], meter)
            if not step_was_skipped(self.ctx["accelerator"]):
                done += 1
                continue
            self.skipped_steps += 1
            if self.skipped_steps > MAX_SKIPPED_WARMUPS:
                raise SkippedStep(f"the fp16 GradScaler skipped {self.skipped_steps} warm-up steps in a row")

    def run(self, batches_per_step, meter, warmup_steps=1):
        """Warm-up step(s), then one measured step inside a fresh meter window."""
        self._warm_up(batches_per_step, meter, warmup_steps)
        self.grads_at_step_start = grads_state(self.ctx["model"])
        meter.reset_peak()
        run_step(self.ctx, batches_per_step[warmup_steps], meter)
        meter.mark(None)
        if step_was_skipped(self.ctx["accelerator"]):
            raise SkippedStep("the fp16 GradScaler skipped the measured step (inf/nan gradients): "
                              "its bytes are not a steady-state step's")

    def close(self):
        """Drop references and accelerate's singletons."""
        self.ctx.clear()
        reset_accelerate_state()
