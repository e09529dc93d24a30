#!/usr/bin/env python3
# >>> header
# A standalone reproduction of the ga_memory probe's measurement (bisector writes the run's own header
# here: what it reproduces, both sides' pins and install lines).
# <<<
"""Peak memory of one training step with gradient accumulation, fp32 against mixed precision.

For every width, precision and GA in SETTINGS: a causal LM from a transformers config with random
weights (nothing is downloaded), one warm-up optimizer step, then one measured step whose peak of
live tensor bytes is taken. The peaks are fitted over the models' parameter counts
(``peak = a * params + b``), and METRIC is computed from the fits as bisector's ga_memory probe does:

    GA cost        = peak(GA=max) - peak(GA=min) in the mixed precision (fp32_ga_cost: in fp32)
    mixed cost     = peak(mixed, GA=min) - peak(fp32, GA=min)
    GA excess      = GA cost - fp32 GA cost   (what GA costs in mixed precision beyond fp32)

Needs only torch, transformers and accelerate. Prints every cell's peak (stderr) and METRIC with its
verdict (stdout); exits 0 when GOOD and 1 when BAD by THRESHOLD (so ``git bisect run python this.py``
works too). Run by bisector (``$BISECTOR_RESULT`` set), it writes the metrics there and exits 0.
"""
import contextlib
import gc
import json
import os
import sys
import tempfile
import warnings
import weakref

import torch

# >>> settings
SETTINGS = {"loop": "accelerate", "arch": "gpt_neox", "sizes": [64, 128, 192, 256], "seq_lens": [8], "layers": 2,
            "heads": 4, "vocab": 512, "max_positions": 64, "batch": 1, "precisions": ["fp32", "bf16"], "ga": [1, 2],
            "optimizer": "sgd", "gradient_checkpointing": True, "use_reentrant": None, "use_cache": False,
            "attn": "eager", "shape": {}, "shape_hidden": None, "model_factory": None,
            "zero_grad_target": "optimizer", "zero_grad_policy": "default", "max_grad_norm": 0.0,
            "lr_scheduler": "none", "precision_via": "arg", "warmup_steps": 1, "seed": 0, "threads": 1,
            "device": "cpu"}
METRIC, THRESHOLD, DIRECTION = "ga_excess_bytes_per_param", 0.5, "increase"
# <<<
S = SETTINGS
ACCELERATE_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}
DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


# -- the model: from a config, random weights ---------------------------------------------------------
def ffn_size(hidden):
    base = S["shape"].get("intermediate_size")
    if base:   # a real model's shape: its FFN scaled with the width
        return int(round(base * hidden / S["shape_hidden"]))
    if S["arch"] == "llama":
        return max(8, 8 * round(hidden * 8 / 3 / 8))
    return 4 * hidden


def build_model(hidden):
    torch.manual_seed(S["seed"])
    with torch.device(S["device"]):
        if S["model_factory"]:   # MODULE:FUNCTION, importable here
            import importlib

            module, _, name = S["model_factory"].partition(":")
            model = getattr(importlib.import_module(module), name)(
                hidden=hidden, layers=S["layers"], heads=S["heads"], vocab=S["vocab"],
                max_positions=S["max_positions"], use_cache=S["use_cache"])
        else:
            import transformers

            fields = {k: v for k, v in S["shape"].items() if k != "intermediate_size"}
            fields.update(hidden_size=hidden, num_hidden_layers=S["layers"], num_attention_heads=S["heads"],
                          intermediate_size=ffn_size(hidden), vocab_size=S["vocab"],
                          max_position_embeddings=S["max_positions"], use_cache=S["use_cache"],
                          tie_word_embeddings=False)
            config = transformers.AutoConfig.for_model(S["arch"], **fields)
            if S["attn"] == "default":
                model = transformers.AutoModelForCausalLM.from_config(config)
            else:
                try:
                    model = transformers.AutoModelForCausalLM.from_config(
                        config, attn_implementation={"flash": "flash_attention_2"}.get(S["attn"], S["attn"]))
                except TypeError:   # transformers < 4.36: eager is all there is
                    if S["attn"] != "eager":
                        raise
                    model = transformers.AutoModelForCausalLM.from_config(config)
    model.to(torch.float32)
    model.train()
    if S["gradient_checkpointing"] and hasattr(model, "gradient_checkpointing_enable"):
        if S["use_reentrant"] is None:
            model.gradient_checkpointing_enable()
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": S["use_reentrant"]})
    return model.to(S["device"])


def make_batches(ga, seq_len):
    """``ga`` micro-batches of seeded random token ids (labels = inputs)."""
    gen = torch.Generator().manual_seed(S["seed"] + 1)
    batches = []
    for _ in range(ga):
        ids = torch.randint(0, S["vocab"], (S["batch"], seq_len), generator=gen).to(S["device"])
        batches.append({"input_ids": ids, "labels": ids.clone()})
    return batches


def make_optimizer(params):
    if S["optimizer"] == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    return torch.optim.SGD(params, lr=1e-3)


def state_tensors(model, optimizer):
    """What a step starts with: parameters, their gradients, buffers, optimizer state."""
    for p in model.parameters():
        yield p
        yield p.grad
    yield from model.buffers()
    for per_param in getattr(optimizer, "optimizer", optimizer).state.values():
        yield from per_param.values()


def reset_accelerate_state():
    from accelerate import state

    for name, args in (("AcceleratorState", (True,)), ("GradientState", ()), ("PartialState", ())):
        reset = getattr(getattr(state, name, None), "_reset_state", None)
        if reset is not None:
            try:
                reset(*args)
            except TypeError:
                reset()


# >>> loop=accelerate
# -- the loop: accelerate's, as user code writes it ----------------------------------------------------
def zero_grad(target):
    if S["zero_grad_policy"] == "default":
        target.zero_grad()
    else:
        target.zero_grad(set_to_none=S["zero_grad_policy"] == "none")


class Loop:
    def __init__(self, precision, ga, model):
        import inspect

        from accelerate import Accelerator

        reset_accelerate_state()
        wanted = ACCELERATE_PRECISION[precision]
        kwargs = {"gradient_accumulation_steps": ga}
        if S["precision_via"] == "env":
            os.environ["ACCELERATE_MIXED_PRECISION"] = wanted
        else:
            kwargs["mixed_precision"] = wanted
        if S["device"] == "cpu" and "cpu" in inspect.signature(Accelerator.__init__).parameters:
            kwargs["cpu"] = True
        self.accelerator = Accelerator(**kwargs)
        got = str(getattr(self.accelerator, "mixed_precision", self.accelerator.state.mixed_precision))
        if got != wanted:
            raise SystemExit(f"accelerate applied mixed_precision={got!r}, asked {wanted!r}")
        optimizer = make_optimizer(model.parameters())
        self.scheduler = None
        if S["lr_scheduler"] == "constant":
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
            self.model, self.optimizer, self.scheduler = self.accelerator.prepare(model, optimizer, self.scheduler)
        else:
            self.model, self.optimizer = self.accelerator.prepare(model, optimizer)

    def state_tensors(self):
        return state_tensors(self.model, self.optimizer)

    def step(self, batches):
        accelerator, model = self.accelerator, self.model
        target = model if S["zero_grad_target"] == "model" else self.optimizer
        for batch in batches:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                if S["max_grad_norm"] > 0 and accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), S["max_grad_norm"])
                self.optimizer.step()
                if self.scheduler is not None:
                    self.scheduler.step()
                if target is self.optimizer or accelerator.sync_gradients:
                    zero_grad(target)
            del loss

    def run(self, steps, meter):
        """Warm-up steps (a step the fp16 GradScaler skipped is repeated), then the measured one."""
        done = skipped = 0
        while done < S["warmup_steps"]:
            self.step(steps[done])
            if getattr(self.accelerator, "optimizer_step_was_skipped", False):
                skipped += 1
                if skipped > 8:
                    raise SystemExit("the fp16 GradScaler skipped 8 warm-up steps in a row")
                continue
            done += 1
        meter.start()
        self.step(steps[S["warmup_steps"]])
        meter.stop()

    def close(self):
        reset_accelerate_state()
# <<<


# >>> loop=trainer
# -- the loop: transformers.Trainer, max_steps = warm-up + 1 -------------------------------------------
class Loop:
    def __init__(self, precision, ga, model):
        reset_accelerate_state()
        self.precision, self.ga, self.model = precision, ga, model
        self.optimizer = make_optimizer(model.parameters())
        self.tmp = tempfile.TemporaryDirectory(prefix="repro_trainer_")

    def state_tensors(self):
        return state_tensors(self.model, self.optimizer)

    def _args(self, steps):
        from transformers import TrainingArguments

        by_arg = S["precision_via"] == "arg"
        if not by_arg:
            os.environ["ACCELERATE_MIXED_PRECISION"] = ACCELERATE_PRECISION[self.precision]
        kwargs = dict(output_dir=self.tmp.name, per_device_train_batch_size=S["batch"],
                      gradient_accumulation_steps=self.ga, max_steps=steps, max_grad_norm=S["max_grad_norm"],
                      bf16=by_arg and self.precision == "bf16", fp16=by_arg and self.precision == "fp16",
                      report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
                      dataloader_pin_memory=False, seed=S["seed"])
        if S["device"] == "cpu":
            kwargs["use_cpu" if "use_cpu" in TrainingArguments.__dataclass_fields__ else "no_cuda"] = True
        return TrainingArguments(**kwargs)

    def run(self, steps, meter):
        """Trainer over the micro-batches; its callbacks open the window at the measured step."""
        from transformers import Trainer, TrainerCallback

        warmup = S["warmup_steps"]

        class Window(TrainerCallback):
            measuring = False

            def on_step_begin(self, args, state, control, **kw):
                if state.global_step == warmup:
                    meter.start()
                    self.measuring = True

            def on_step_end(self, args, state, control, **kw):
                if self.measuring:
                    meter.stop()
                    self.measuring = False

        data = [{k: v[r] for k, v in b.items()} for step in steps for b in step for r in range(b["input_ids"].shape[0])]
        scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda _: 1.0)
        trainer = Trainer(model=self.model, args=self._args(len(steps)), train_dataset=data,
                          optimizers=(self.optimizer, scheduler), callbacks=[Window()])
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
            trainer.train()
        if meter.peak is None:
            raise SystemExit("Trainer never reached the measured step")

    def close(self):
        self.tmp.cleanup()
        reset_accelerate_state()
# <<<


# >>> meter=cpu
# -- the meter: live tensor bytes, exact on the CPU (the probe's cpu-dispatch meter) -------------------
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402


def tensors_in(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for item in obj for t in tensors_in(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in tensors_in(item)]
    return []


class Meter(TorchDispatchMode):
    """Every tensor storage each aten op reads or makes is counted once, from when it is first seen
    until it is freed (a finalizer on its storage object, torch >= 2.1); ``peak`` is the most bytes
    alive between ``start()`` and ``stop()``. ``created`` counts the bytes the window made, by dtype."""

    kind = "cpu-dispatch"

    def __init__(self):
        super().__init__()
        t = torch.empty(1)
        if t.untyped_storage() is not t.untyped_storage():
            raise SystemExit("this meter needs torch >= 2.1 (one Python object per storage)")
        self.sizes, self.finalizers, self.live = {}, {}, 0
        self.peak, self.open, self.created = None, False, {}

    def track(self, tensors):
        for t in tensors:
            if isinstance(t, torch.Tensor):
                self.see(t, made=False)

    def see(self, tensor, made=True):
        if tensor.device.type != "cpu":
            return
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return
        key, nbytes = storage._cdata, storage.nbytes()
        old = self.sizes.get(key)
        if old is None:
            if nbytes == 0:
                return
            self.finalizers[key] = weakref.finalize(storage, self.freed, key)
            if made and self.open:
                dtype = str(tensor.dtype).replace("torch.", "")
                self.created[dtype] = self.created.get(dtype, 0) + nbytes
            self.add(key, nbytes)
        elif old != nbytes:   # resized in place
            self.add(key, nbytes - old)

    def add(self, key, delta):
        self.sizes[key] = self.sizes.get(key, 0) + delta
        self.live += delta
        if self.open and self.live > self.peak:
            self.peak = self.live

    def freed(self, key):
        self.finalizers.pop(key, None)
        self.live -= self.sizes.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in tensors_in(args) + tensors_in(kwargs):
            self.see(t, made=False)
        out = func(*args, **kwargs)
        for t in tensors_in(out):
            self.see(t)
        return out

    def start(self):
        self.created, self.open, self.peak = {}, True, self.live

    def stop(self):
        self.open = False

    def close(self):
        for handle in self.finalizers.values():
            handle.detach()
        self.finalizers.clear()
# <<<


# >>> meter=cuda
# -- the meter: the CUDA allocator's peak of allocated bytes ---------------------------------------------
class Meter(contextlib.nullcontext):
    """``torch.cuda.max_memory_allocated`` between ``start()`` and ``stop()``."""

    kind = "cuda"

    def __init__(self):
        super().__init__()
        self.peak, self.created = None, None

    def track(self, tensors):
        pass

    def start(self):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def stop(self):
        torch.cuda.synchronize()
        self.peak = int(torch.cuda.max_memory_allocated())

    def close(self):
        pass
# <<<


# -- one cell: the precision proved, then its peak --------------------------------------------------------
def autocast_state():
    device = torch.device(S["device"]).type
    try:
        on = torch.is_autocast_enabled(device)
        dtype = torch.get_autocast_dtype(device) if on else None
    except TypeError:   # torch < 2.4
        on = torch.is_autocast_cpu_enabled() if device == "cpu" else torch.is_autocast_enabled()
        dtype = (torch.get_autocast_cpu_dtype() if device == "cpu" else torch.get_autocast_gpu_dtype()) if on else None
    return on, dtype


def measure_cell(hidden, seq_len, precision, ga):
    """(peak bytes of the measured step, parameters) of one cell; SystemExit if the precision is not proved."""
    saved = dict(os.environ)   # accelerate's variables out, and whatever TrainingArguments writes undone after
    for name in [k for k in os.environ if k.startswith("ACCELERATE_")]:
        del os.environ[name]
    try:
        model = build_model(hidden)
        n_params = sum(p.numel() for p in model.parameters())
        seen = set()
        first_linear = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
        hook = first_linear.register_forward_hook(lambda m, i, out: seen.add((*autocast_state(), out.dtype)))
        loop = Loop(precision, ga, model)
        del model
        steps = [make_batches(ga, seq_len) for _ in range(S["warmup_steps"] + 1)]
        meter = Meter()
        meter.track(loop.state_tensors())
        meter.track(t for step in steps for b in step for t in b.values())
        gc.collect()
        gc.disable()   # no collection at a random moment inside the window: the bytes are deterministic
        try:
            with meter:
                loop.run(steps, meter)
        finally:
            gc.enable()
            meter.close()
            hook.remove()
        loop.close()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    mixed = precision != "fp32"
    want = (mixed, DTYPE[precision] if mixed else None, DTYPE[precision])
    if seen != {want}:
        raise SystemExit(f"{precision} GA={ga} h{hidden}: the forward did not run in {precision} ({sorted(map(str, seen))})")
    half = {d for d, n in (meter.created or {}).items() if d in ("bfloat16", "float16") and n}
    if meter.created is not None and (bool(half) != mixed):
        raise SystemExit(f"{precision} GA={ga} h{hidden}: the step's half-precision bytes do not match {precision}")
    if S["device"] == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
    return meter.peak, n_params


# -- the fits and the metric ------------------------------------------------------------------------------
def fit(points):
    """Least squares ``bytes = a * params + c * tokens + b`` over {(params, tokens): bytes}: a, b, c, R²."""
    xs, ts, ys = zip(*((x, t, y) for (x, t), y in sorted(points.items())))
    n = len(ys)
    if n == 1:   # one model, one length: bytes per parameter as a ratio
        return {"a": ys[0] / xs[0]}
    mx, mt, my = sum(xs) / n, sum(ts) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    stt = sum((t - mt) ** 2 for t in ts)
    sxt = sum((x - mx) * (t - mt) for x, t in zip(xs, ts))
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sty = sum((t - mt) * (y - my) for t, y in zip(ts, ys))
    if stt == 0:
        a, c = sxy / sxx, None
    elif sxx == 0:
        a, c = None, sty / stt
    else:
        det = sxx * stt - sxt * sxt
        a, c = (sxy * stt - sty * sxt) / det, (sty * sxx - sxy * sxt) / det
    b = my - (a or 0.0) * mx - (c or 0.0) * mt
    out = {"b": b} if a is not None else {}
    out.update({k: v for k, v in (("a", a), ("c", c)) if v is not None})
    return out


def metrics(peaks, params):
    """Every metric the probe derives from the step peaks, by its name."""
    multi_t = len(S["seq_lens"]) > 1
    out = {}
    for (prec, ga, h, t), value in peaks.items():
        out[f"peak_bytes.{prec}.ga{ga}.h{h}" + (f".t{t}" if multi_t else "")] = float(value)

    def group(prec, ga):
        return {(params[h], S["batch"] * t): peaks[prec, ga, h, t] for h in S["sizes"] for t in S["seq_lens"]}

    def put(prefix, plus, minus):
        coefficients = fit({k: plus[k] - minus[k] for k in plus})
        for key, unit in (("a", "bytes_per_param"), ("b", "fixed_bytes"), ("c", "bytes_per_token")):
            if key in coefficients:
                out[f"{prefix}_{unit}"] = coefficients[key]

    lo, hi = min(S["ga"]), max(S["ga"])
    mixed = next((p for p in ("bf16", "fp16") if p in S["precisions"]), None)
    for prec in S["precisions"] if hi != lo else ():
        put("ga_cost" if prec == mixed else f"{prec}_ga_cost", group(prec, hi), group(prec, lo))
    if mixed and "fp32" in S["precisions"]:
        put("mixed_cost", group(mixed, lo), group("fp32", lo))
        if hi != lo:
            excess = {k: group(mixed, hi)[k] - group(mixed, lo)[k] for k in group(mixed, lo)}
            put("ga_excess", excess, {k: group("fp32", hi)[k] - group("fp32", lo)[k] for k in excess})
    return out


def human(value, name):
    if name.endswith("bytes_per_param"):
        return f"{value:.3f} B/param"
    if name.endswith("bytes_per_token"):
        return f"{value:.1f} B/token"
    return f"{value / 2 ** 20:.2f} MiB"


def main():
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if S["threads"]:
        torch.set_num_threads(S["threads"])
    with contextlib.suppress(Exception):
        from transformers.utils import logging

        logging.set_verbosity_error()
    import accelerate
    import transformers

    gc.freeze()   # the imports' objects stay out of every later collection (each cell collects before it measures)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, accelerate {accelerate.__version__}; "
          f"{S['loop']} loop on {S['device']}, meter {Meter.kind}", file=sys.stderr)
    peaks, params = {}, {}
    cells = [(h, t, prec, ga) for h in S["sizes"] for t in S["seq_lens"] for prec in S["precisions"] for ga in S["ga"]]
    for k, (h, t, prec, ga) in enumerate(cells, 1):
        peaks[prec, ga, h, t], params[h] = measure_cell(h, t, prec, ga)
        print(f"  cell {k}/{len(cells)}: {prec} GA={ga} h{h}, {S['batch'] * t} tokens, {params[h]:,} params: "
              f"peak {human(peaks[prec, ga, h, t], 'bytes')}", file=sys.stderr, flush=True)
    found = metrics(peaks, params)
    if METRIC not in found:
        raise SystemExit(f"{METRIC} cannot be computed from these settings (it computes: {', '.join(sorted(found))})")
    value = found[METRIC]
    bad = value > THRESHOLD if DIRECTION == "increase" else value < THRESHOLD
    side = ">" if DIRECTION == "increase" else "<"
    print(f"{METRIC} = {human(value, METRIC)}: {'BAD' if bad else 'GOOD'} (BAD when {side} {human(THRESHOLD, METRIC)})")
    if os.environ.get("BISECTOR_RESULT"):   # bisector running it: the numbers go to its result file, it judges
        with open(os.environ["BISECTOR_RESULT"], "w") as fh:
            json.dump({"metrics": found}, fh)
        return 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
