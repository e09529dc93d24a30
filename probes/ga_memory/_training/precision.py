"""Proof of the precision a cell really ran in, from what its forward did (not what it asked for).

A cell asks for fp32, bf16 or fp16 through a loop's own setting; process-wide state (an
``ACCELERATE_MIXED_PRECISION`` left behind by ``TrainingArguments``, accelerate's singletons) can
make it run in another. :class:`PrecisionWitness` hooks the model's first ``nn.Linear`` and records,
for every call, whether autocast was on (and in which dtype) for the cell's device and the dtype of
the layer's output. A cell is measured only when every call agrees with its precision: fp32 means
autocast off and float32 outputs; bf16 / fp16 mean autocast in that dtype and outputs in it. Where
the meter also counts storages by dtype (the CPU meter), no half-precision storage may appear in an
fp32 cell and some must appear in a mixed one. Anything else is an error with the reason.
"""
from __future__ import annotations

import collections

import torch

EXPECTED = {"fp32": (False, "float32"), "bf16": (True, "bfloat16"), "fp16": (True, "float16")}
HALF = ("bfloat16", "float16")


def autocast_state(device_type: str):
    """(enabled, dtype name or None) of autocast for ``device_type``, on any torch >= 2.0."""
    try:
        enabled = torch.is_autocast_enabled(device_type)
        dtype = torch.get_autocast_dtype(device_type) if enabled else None
    except TypeError:  # torch < 2.4: per-device functions
        if device_type == "cpu":
            enabled = torch.is_autocast_cpu_enabled()
            dtype = torch.get_autocast_cpu_dtype() if enabled else None
        else:
            enabled = torch.is_autocast_enabled()
            dtype = torch.get_autocast_gpu_dtype() if enabled else None
    return bool(enabled), (str(dtype).replace("torch.", "") if dtype is not None else None)


class PrecisionWitness:
    """Watches the first Linear layer's calls; ``verdict(precision)`` says whether they prove it."""

    def __init__(self, model, device_type: str):
        self.device_type = device_type
        self.calls = collections.Counter()
        layer = next((m for m in model.modules() if isinstance(m, torch.nn.Linear)), None)
        self.layer = type(layer).__name__ if layer is not None else None
        self._handle = layer.register_forward_hook(self._seen) if layer is not None else None

    def _seen(self, module, inputs, output):
        enabled, dtype = autocast_state(self.device_type)
        out = str(output.dtype).replace("torch.", "") if isinstance(output, torch.Tensor) else "?"
        self.calls[(enabled, dtype, out)] += 1

    def close(self) -> None:
        """Remove the hook."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def observed(self) -> list:
        """Every distinct observation with its count, for the cell record."""
        return [{"autocast": dtype if enabled else "off", "output": out, "calls": n}
                for (enabled, dtype, out), n in sorted(self.calls.items(), key=str)]

    def problem(self, precision: str, meter_dtypes=None):
        """None when the observations prove ``precision``, else the reason they do not."""
        if not self.calls:
            return "the model's forward was never observed (no Linear layer ran)"
        want_on, want_dtype = EXPECTED[precision]
        for (enabled, dtype, out), n in self.calls.items():
            if enabled != want_on or (want_on and dtype != want_dtype) or out != want_dtype:
                seen = f"autocast {dtype}" if enabled else "autocast off"
                return (f"asked {precision}, but {n} forward call(s) ran with {seen} and {out} outputs: "
                        f"this loop and version did not apply {precision}")
        return _meter_problem(precision, meter_dtypes)


def _meter_problem(precision: str, meter_dtypes):
    """The CPU meter's dtype count as a second witness (None when the meter has no such count)."""
    if not meter_dtypes:
        return None
    half = {d: b for d, b in meter_dtypes.items() if d in HALF and b > 0}
    if precision == "fp32" and half:
        return f"asked fp32, but the step allocated {', '.join(f'{b} B of {d}' for d, b in sorted(half.items()))}"
    if precision != "fp32" and EXPECTED[precision][1] not in half:
        return f"asked {precision}, but the step allocated no {EXPECTED[precision][1]} tensor"
    return None
