"""The second loop: ``transformers.Trainer`` running the same cell (max_steps = warm-up + 1).

Phases come from hooks: ``compute_loss`` (forward) and the rest of ``training_step``
(backward) per micro-step, then ``step`` (grad clipping, optimizer step, scheduler,
``model.zero_grad()``; split at ``on_optimizer_step`` where the callback exists) until
``on_step_end``. Trainer's own defaults (grad-norm clipping, its zero_grad) are kept.
"""
from __future__ import annotations

import contextlib
import os
import tempfile

from .accelerate_loop import PRECISION_ENV, PRECISION_TO_ACCELERATE, SkippedStep, grads_state, make_optimizer, \
    reset_accelerate_state, state_tensors


def _training_args(spec, cell, outdir, steps):
    """TrainingArguments for the cell; ``precision_via="env"`` sets only ACCELERATE_MIXED_PRECISION,
    as the seed report did (``TrainingArguments`` reads it, the cell restores the environment)."""
    from transformers import TrainingArguments

    fields = TrainingArguments.__dataclass_fields__
    by_args = spec["precision_via"] == "arg"
    if not by_args:
        os.environ[PRECISION_ENV] = PRECISION_TO_ACCELERATE[cell["precision"]]
    kwargs = dict(
        output_dir=outdir,
        per_device_train_batch_size=spec["batch"],
        gradient_accumulation_steps=cell["ga"],
        max_steps=steps,
        max_grad_norm=spec["max_grad_norm"],
        bf16=by_args and cell["precision"] == "bf16",
        fp16=by_args and cell["precision"] == "fp16",
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_pin_memory=False,
        seed=spec["seed"],
    )
    if spec["device"] == "cpu":
        kwargs["use_cpu" if "use_cpu" in fields else "no_cuda"] = True
    return TrainingArguments(**kwargs)


class _Hooks:
    """Turns Trainer callbacks and overridden methods into meter marks."""

    def __init__(self, meter, warmup_steps, model):
        self.meter = meter
        self.warmup = warmup_steps
        self.model = model
        self.measuring = False
        self.micro = 0
        self.grads_at_step_start = None
        self.skipped_steps = 0

    def step_begin(self, global_step):
        if global_step == self.warmup:
            self.grads_at_step_start = grads_state(self.model)
            self.meter.reset_peak()
            self.measuring = True
        self.micro = 0

    def mark(self, name):
        self.meter.mark(name)

    def step_end(self, skipped: bool):
        self.skipped_steps += skipped
        if self.measuring:
            self.meter.mark(None)
            self.measuring = False


def _callback(hooks):
    from transformers import TrainerCallback

    class PhaseCallback(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            hooks.step_begin(state.global_step)

        def on_optimizer_step(self, args, state, control, **kw):
            hooks.mark("zero_grad")

        def on_step_end(self, args, state, control, **kw):
            hooks.step_end(bool(getattr(kw.get("optimizer"), "step_was_skipped", False)))

    return PhaseCallback()


def _trainer_class(hooks, fake=None):
    from transformers import Trainer

    class PhaseTrainer(Trainer):
        def get_train_dataloader(self, *args, **kwargs):
            loader = super().get_train_dataloader(*args, **kwargs)
            if fake is not None:  # the sampler reads a permutation's values: the data side stays real
                fake.iterate_real(loader)
            return loader

        def training_step(self, *args, **kwargs):
            hooks.mark(f"m{hooks.micro}.forward")
            out = super().training_step(*args, **kwargs)
            hooks.micro += 1
            hooks.mark("step")
            return out

        def compute_loss(self, *args, **kwargs):
            out = super().compute_loss(*args, **kwargs)
            hooks.mark(f"m{hooks.micro}.backward")
            return out

    return PhaseTrainer


class TrainerLoop:
    """Runs a cell through ``transformers.Trainer``."""

    name = "trainer"

    def __init__(self, spec, cell, model, fake=None):
        """``fake``: the cell's fake mode (``_meters.fake_mode.FakeSession``) or None; with it the
        Trainer's data loader fetches outside fake mode (real token ids, a real sampler)."""
        reset_accelerate_state()
        self.spec, self.cell, self.model, self.fake = spec, cell, model, fake
        self.optimizer = make_optimizer(spec["optimizer"], model.parameters())
        self._tmp = tempfile.TemporaryDirectory(prefix="ga_memory_trainer_")
        self.grads_at_step_start = None
        self.skipped_steps = 0

    def state_tensors(self):
        """Tensors alive before the first step (for ``meter.track``)."""
        return state_tensors(self.model, self.optimizer)

    def run(self, batches_per_step, meter, warmup_steps=1):
        """Trainer over the flattened micro-batches; the hooks open the measured window."""
        import torch

        hooks = _Hooks(meter, warmup_steps, self.model)
        data = [  # one sample per row; Trainer re-batches them into the same micro-batches
            {k: v[r] for k, v in b.items()}
            for step in batches_per_step
            for b in step
            for r in range(b["input_ids"].shape[0])
        ]
        scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda _: 1.0)
        trainer = _trainer_class(hooks, self.fake)(
            model=self.model,
            args=_training_args(self.spec, self.cell, self._tmp.name, len(batches_per_step)),
            train_dataset=data,
            optimizers=(self.optimizer, scheduler),
            callbacks=[_callback(hooks)],
        )
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # Trainer prints its metrics
            trainer.train()
        if meter.end_bytes is None:
            raise RuntimeError("Trainer never reached the measured step")
        self.grads_at_step_start = hooks.grads_at_step_start
        self.skipped_steps = hooks.skipped_steps
        if self.skipped_steps:  # Trainer's step count is fixed: a skipped step cannot be repeated
            raise SkippedStep(f"the fp16 GradScaler skipped {self.skipped_steps} of Trainer's steps: "
                              "the measured step is not a steady-state one")

    def close(self):
        """Release the temp dir and accelerate's singletons."""
        self._tmp.cleanup()
        reset_accelerate_state()
