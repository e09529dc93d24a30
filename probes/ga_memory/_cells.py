"""Cells: one (width, precision, gradient accumulation) measurement each.

``run_cell`` builds the model, sets up the loop, runs warm-up and measured steps under a meter
and returns a plain dict; any failure becomes the cell's ``error`` (the probe carries on).
``run_cell_isolated`` runs the same in a fresh interpreter (``--cell``), as done on CUDA so one
cell's allocator state or OOM cannot leak into the next.
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

import torch

from _meters.phases import DEVICE_METER
from _models.build import build_model, make_batches
from _training.accelerate_loop import AccelerateLoop
from _training.precision import PrecisionWitness

ACCELERATE_PREFIX = "ACCELERATE_"


class PrecisionNotProved(RuntimeError):
    """The cell's forward did not run in the precision the cell asked for."""


class WrongPlace(RuntimeError):
    """The cell's model or meter is not the one of the cell's device."""


def plan(spec) -> list:
    """All cells, size-major: [{"hidden", "seq_len", "precision", "ga"}, ...]."""
    return [
        {"hidden": h, "seq_len": t, "precision": p, "ga": g}
        for h in spec["sizes"]
        for t in spec["seq_lens"]
        for p in spec["precisions"]
        for g in spec["ga"]
    ]


def make_meter(spec):
    """The meter for the spec's device: exact dispatch meter on CPU, allocator stats on CUDA (its
    peak counters reset per phase or only at the window's start, as ``--cuda-reset`` says); with
    ``--fake`` the dispatch meter on fake tensors."""
    if spec["device"] == "cuda" and not spec.get("fake"):
        from _meters.cuda import CudaMeter

        return CudaMeter(device=torch.device("cuda"), reset=spec["cuda_reset"])
    from _allocator_model.conf import settings_from_spec
    from _allocator_model.replay import AllocatorEstimate
    from _meters.cpu import StorageMeter
    from _meters.fake_mode import FakeStorageMeter

    kind = FakeStorageMeter if spec.get("fake") else StorageMeter
    return kind(device_type=spec["device"], attribution=spec["attribution"],
                allocations=AllocatorEstimate(settings_from_spec(spec), keep_trace=spec.get("alloc_trace", False)))


def expected_meter(spec) -> str:
    """The meter a cell of the spec must be measured with."""
    from _meters.fake_mode import FAKE

    return DEVICE_METER["cpu"] + FAKE if spec.get("fake") else DEVICE_METER[torch.device(spec["device"]).type]


def placement_problem(spec, model, meter) -> str | None:
    """Why the cell would not measure its own device: its model built elsewhere, or a meter that
    counts another device's memory (None when both are the cell's)."""
    device = torch.device(spec["device"]).type
    if meter.kind != expected_meter(spec):
        return f"a {device} cell measured with meter {meter.kind}, not {expected_meter(spec)}"
    elsewhere = sorted({p.device.type for p in model.parameters()} - {device})
    if elsewhere:
        return (f"the model's parameters are on {', '.join(elsewhere)}, the cell runs on {device}: it must be "
                f"built on its device")
    return None


def _loop_class(name):
    if name == "trainer":
        from _training.trainer_loop import TrainerLoop

        return TrainerLoop
    return AccelerateLoop


@contextlib.contextmanager
def process_state():
    """Each cell starts from the environment the probe started with, minus accelerate's own
    variables, and leaves it as it found it: ``TrainingArguments`` writes
    ``ACCELERATE_MIXED_PRECISION`` into ``os.environ``, which the next cell's Accelerator would
    otherwise read (an fp32 cell after a bf16 one ran in bf16)."""
    saved = dict(os.environ)
    for name in [k for k in os.environ if k.startswith(ACCELERATE_PREFIX)]:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _window(spec, loop, meter, steps):
    """Run the loop's warm-up and measured steps under the meter, cyclic GC paused."""
    meter.track(loop.state_tensors())
    meter.track(t for step in steps for b in step for t in b.values())
    gc.collect()
    gc.disable()  # no collection at random moments inside the window: bytes stay deterministic
    try:
        with meter:
            loop.run(steps, meter, spec["warmup_steps"])
    finally:
        gc.enable()
        meter.close()


def _record_window(spec, cell, record, meter, loop, witness):
    """The meter's numbers, the attribution and the precision proof into the cell record."""
    record.update(meter.report())
    record["meter"] = meter.kind
    record["grads_at_step_start"] = loop.grads_at_step_start
    record["skipped_steps"] = loop.skipped_steps
    if spec.get("attribution"):
        record["attribution"] = meter.attribution(spec.get("top", 12))
        record["phase_attribution"] = meter.phase_attribution(spec.get("top", 12))
    record["precision_observed"] = witness.observed()
    problem = witness.problem(cell["precision"], record.get("dtype_bytes"))
    if problem:
        raise PrecisionNotProved(problem)


def _cap_cuda_memory(spec):
    if spec["device"] == "cuda" and spec.get("cuda_memory_fraction"):
        torch.cuda.set_per_process_memory_fraction(spec["cuda_memory_fraction"])


def _fake_session(spec):
    """The cell's fake mode (``--fake``), or None; a torch that cannot fake raises with the reason."""
    if not spec.get("fake"):
        return None
    from _meters.fake_mode import FakeSession, fake_problem

    problem = fake_problem()
    if problem:
        raise RuntimeError(problem)
    return FakeSession()


def _measure(spec, cell, record, clock):
    """Build, set up and measure the cell; with ``--fake`` all of it on fake tensors but the batches
    (token ids are data: real, and counted as the real tensors they are)."""
    _cap_cuda_memory(spec)
    session = _fake_session(spec)
    seq_len = cell["seq_len"]
    with session.real() if session else contextlib.nullcontext():
        steps = [make_batches(spec, cell["ga"], spec["device"], seq_len) for _ in range(spec["warmup_steps"] + 1)]
    with session or contextlib.nullcontext():
        model, facts = build_model(spec, cell["hidden"])
        record.update(facts)
        meter = make_meter(spec)
        misplaced = placement_problem(spec, model, meter)
        if misplaced:
            raise WrongPlace(misplaced)
        witness = PrecisionWitness(model, torch.device(spec["device"]).type)
        clock.lap("build")
        loop = _loop_class(spec["loop"])(spec, cell, model, fake=session)
        del model
        try:
            record["tokens"] = spec["batch"] * seq_len
            clock.lap("setup")
            _window(spec, loop, meter, steps)
            clock.lap("steps")
            _record_window(spec, cell, record, meter, loop, witness)
        finally:
            witness.close()
            loop.close()


class _Clock:
    def __init__(self):
        self.t = time.perf_counter()
        self.laps = {}

    def lap(self, name):
        now = time.perf_counter()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self.t, 4)
        self.t = now


def _describe(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1:]
    at = f" (at {os.path.basename(where[0].filename)}:{where[0].lineno})" if where else ""
    return f"{type(exc).__name__}: {exc}"[:2000] + at


def run_cell(spec, cell) -> dict:
    """Measure one cell in this process; errors are recorded, never raised."""
    record = dict(cell)
    clock = _Clock()
    try:
        with process_state():
            _measure(spec, cell, record, clock)
    except PrecisionNotProved as exc:
        record["error"] = f"precision not proved: {exc}"
        record.pop("peak_bytes", None)  # a number measured in the wrong precision is no number
        clock.lap("failed")
    except Exception as exc:  # noqa: BLE001 - a cell that cannot run is a result, not a crash
        record["error"] = _describe(exc)
        clock.lap("failed")
    finally:
        if spec["device"] == "cuda" and torch.cuda.is_available():
            gc.collect()
            torch.cuda.empty_cache()
    record["seconds"] = clock.laps
    return record


def run_cell_isolated(script, argv, cell, timeout) -> dict:
    """Measure one cell in a fresh interpreter running ``script argv --cell ...``."""
    with tempfile.TemporaryDirectory(prefix="ga_memory_cell_") as tmp:
        out = os.path.join(tmp, "cell.json")
        cmd = [sys.executable, script, *argv, "--cell", json.dumps(cell), "--cell-out", out]
        env = {k: v for k, v in os.environ.items() if k != "BISECTOR_RESULT"}
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return {**cell, "error": f"cell process timed out after {timeout:.0f}s"}
        wall = round(time.perf_counter() - start, 4)
        if os.path.exists(out):
            with open(out) as fh:
                record = json.load(fh)
            record.setdefault("seconds", {})["process"] = wall
            return record
        tail = proc.stdout.decode(errors="replace")[-1500:]
        return {**cell, "error": f"cell process exited {proc.returncode} without a result: {tail}",
                "seconds": {"process": wall}}
