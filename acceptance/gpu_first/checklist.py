"""Every check of acceptance/gpu_first in one list: its id, its step, the name check.md gives it, the
condition it fails on, and the margin of its bound with why the bound sits there.

A step records a check by id (``step.check("meter.measured", verdict, label="probe")``): an id not
listed here is a programming error. check.md ends with this table, and docs/gpu.md holds it as
printed by ``python3 acceptance/gpu_first/checklist.py`` (a test keeps the two equal, and every id the
code uses listed). Results: PASS, FAIL; INCOMPLETE when time ran out (the step's deadline, the
budget: never a fault); SKIP (needs CUDA in the dry run, or reads another step's result that is
partial, absent or without a measured cell); FINDING (a number reported, never a fault); WARN (said once, fails nothing).
"""
from __future__ import annotations

import os
import sys
from collections import namedtuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import allocator_model as am  # noqa: E402
from verdicts import FP32_MARGIN, MIN_EXCESS, TOLERANCE  # noqa: E402
from verdicts_device import SMI_MEMORY_BELOW  # noqa: E402

Check = namedtuple("Check", "id step name fails margin")
TOL = f"{TOLERANCE:.0%}"
CUT = "; cut by the step's deadline: INCOMPLETE, its finished cells kept and judged"
GA_LIMIT = am.ga_cost_limit(am.GPU_SIZES, am.GPU_LAYERS, am.GPU_VOCAB)
SEGMENT = am.segment_bpp(am.GPU_SIZES, am.GPU_LAYERS, am.GPU_VOCAB)

CHECKS = [
    Check("facts.stack", "facts", "the ML stack imports",
          "torch, accelerate or transformers does not import (pynvml may be missing: NVML numbers are then "
          "absent, each saying why)", "none: an import works or not"),
    Check("facts.identity", "facts", "torch, NVML and nvidia-smi name the same GPU",
          "torch sees other than exactly one GPU; NVML (by torch's UUID) or nvidia-smi's listing names another; "
          f"torch's total_memory is more than {SMI_MEMORY_BELOW:.0%} below nvidia-smi's memory.total for that "
          "UUID, or above it (1 MiB rounding); the probe's device facts lack NVML or carry another driver",
          f"{SMI_MEMORY_BELOW:.0%}: the driver keeps a little of the board (well under 3% on the cards we know "
          "of; this run's detail gives the share); another card or a MIG slice is 40% or more off"),
    Check("probe.on_cuda", "every CUDA step", "{label}: measured with the CUDA meter on a CUDA device",
          "a probe result's meter is not cuda, its device.type is not cuda, or a cell's meter is not cuda "
          "(no result: FAIL, or INCOMPLETE when the probe was not started for time)", "none: names"),
    Check("meter.measured", "meter", "{label}: the probe measured every cell",
          "the probe exited non-zero, a cell has an error, or nothing was measured" + CUT, "none"),
    Check("meter.reference", "meter", "{label}: the reference run measured every cell",
          "reference.py exited non-zero, wrote no result, or a cell has an error" + CUT, "none"),
    Check("meter.reference_on_cuda", "meter", "{label}: the reference run read torch.cuda on a CUDA device",
          "reference.py's device.type is not cuda, names no GPU, or a cell's meter is not cuda", "none: names"),
    Check("meter.vs_reference", "meter",
          "{label}: the meter's allocated peaks equal torch.cuda.max_memory_allocated's (within 1%)",
          f"a cell both measured is off by more than {TOL}; both complete and their cells differ" + CUT,
          f"{TOL}: both read the same allocator counter over the same window, so equal is expected; {TOL} is "
          "slack for allocations that are not the model's (a library workspace on first use); a meter that "
          "reads another window, or loses the step's peak to a reset, misses whole tensors (10% and more)"),
    Check("invariants.measured", "invariants", "every isolated cell measured",
          "the probe exited non-zero, a cell has an error (each isolated cell has 60 s), or nothing was "
          "measured" + CUT, "none"),
    Check("invariants.per_cell", "invariants", "requested <= allocated <= reserved <= NVML used, per cell",
          "a measured cell breaks one of the inequalities, or lacks one of the numbers",
          "none: each is contained in the next by construction (allocated rounds requests up, reserved holds "
          "the allocated blocks, NVML's device-wide used holds the reserved segments and the context)"),
    Check("invariants.same_peaks", "invariants", "isolated cells allocate what cells in one process do",
          f"a cell measured in both is more than {TOL} apart; both complete and no cell in both; the meter "
          "step's result partial, absent or without a measured cell: SKIP" + CUT,
          f"{TOL}: the same cells on a fresh allocator; allocated bytes are the program's, not the allocator's"),
    Check("resets.measured", "resets", "every cell measured with --cuda-reset window",
          "the probe exited non-zero, a cell has an error, or nothing was measured" + CUT, "none"),
    Check("resets.modes", "resets",
          "--cuda-reset reached the meter; window and per-phase resets give the same step peak",
          "a cell does not say the mode its meter ran in; window mode's phase peaks are not a running maximum "
          "(or per-phase ones are); the two step peaks differ at all; the meter step's result partial, "
          "absent or without a measured cell: SKIP" + CUT, "none: the same counter's maximum, reset or not, equal to the byte"),
    Check("precision.accelerate", "precision", "accelerate loop: {precisions} proved",
          "a cell of fp32, bf16 or fp16 ran its forward in another precision (autocast and output dtypes), or "
          "a cell was not measured" + CUT, "none: dtypes"),
    Check("precision.trainer", "precision", "Trainer loop: {precisions} proved",
          "a bf16 or fp16 Trainer cell ran its forward in another precision, or was not measured" + CUT,
          "none: dtypes"),
    Check("oom.whole", "oom", "a cap below every cell: exit 3, every cell out of memory",
          "under --cuda-memory-fraction 0.000001 the probe does not exit 3 with every cell in oom_cells "
          "(cut: INCOMPLETE)", "the cap is 147 KiB of a 141 GB board: below any model's first parameter"),
    Check("oom.partial", "oom", "a cap between the two widths: exactly the larger one's cells out of memory",
          "under a cap halfway between the meter step's widths' reserved peaks the larger width's cells are "
          "not exactly the ones out of memory, or the probe does not exit 0; no cap can be placed (no "
          "total_bytes, overlapping peaks: FAIL; the meter step's result partial, absent or without a measured "
          "cell: SKIP)" + CUT,
          "half the gap between the smaller width's largest reserved peak and the larger's smallest, on either "
          "side (the step's partial_cap fact gives both peaks and the margin in bytes): a cell would have to "
          "reserve half the gap more or less than in the meter step"),
    Check("seed.measured", "seed", "{shape}: all four cells measured",
          "the probe exited non-zero, a cell has an error, or nothing was measured" + CUT, "none"),
    Check("seed.fp32", "seed", "{shape}: fp32 GA cost <= the embedding gradient's B/param + 0.2",
          f"fp32's GA cost (allocated) is above the fp32 embedding gradient's own B/param + {FP32_MARGIN}, or "
          "the result gives no vocabulary or parameter count",
          "GA=2's second micro-step adds the fp32 embedding gradient (vocab x hidden x 4 B) as a temporary: 0.291 "
          f"B/param for pythia-1.4b, 0.078 for llama-7b (the CPU measured 0.294 for pythia); the margin "
          f"{FP32_MARGIN} is a tenth of the smallest fault it catches, a 16-bit copy of every parameter kept "
          "alive (2 B/param)"),
    Check("seed.bf16_excess", "seed", "{shape}: bf16 GA cost - fp32 GA cost (a finding)",
          "never: FINDING, the number with whether it reaches the CPU's",
          f"not a bound: the CPU finds bf16's GA=2 keeping the 16-bit weight copies beside the accumulated fp32 "
          f"gradients (1.564 B/param for pythia-1.4b; {MIN_EXCESS} is half the copies), the seed's own NVML "
          "numbers give 0.57; which the GPU shows is what this run is to find out, not a fault of it"),
    Check("allocator.ran", "allocator", "the model's comparison ran",
          "allocator_model.py wrote no allocator_model.json (not started for time: INCOMPLETE)", "none"),
    Check("allocator.finished", "allocator", "the model's comparison finished",
          "never FAIL: INCOMPLETE when allocator_model.py was cut before its last cell (each finished cell "
          "kept in allocator/allocator_model.json)", "none"),
    Check("allocator.on_cuda", "allocator", "every CUDA cell ran on a CUDA device and read torch.cuda",
          "the CUDA half did not run, or a finished cell's model was not on cuda or its peaks not torch.cuda's",
          "none: names"),
    Check("allocator.precision_proved", "allocator", "precision_proved",
          "a cell's logits (CUDA and CPU) are not in the cell's precision", "none: dtypes"),
    Check("allocator.cuda_trace_reserved", "allocator", "cuda_trace_reserved",
          f"the model replaying a CUDA cell's own allocator history is more than {am.LIMITS['cuda_trace_reserved']:.0%} "
          "off that cell's max_memory_reserved, or has no number",
          f"{am.LIMITS['cuda_trace_reserved']:.0%}: {am.WHY['cuda_trace_reserved']}"),
    Check("allocator.cuda_trace_allocated", "allocator", "cuda_trace_allocated",
          f"the same replay is more than {am.LIMITS['cuda_trace_allocated']:.0%} off max_memory_allocated, or "
          "has no number", f"{am.LIMITS['cuda_trace_allocated']:.0%}: {am.WHY['cuda_trace_allocated']}"),
    Check("allocator.cpu_trace_reserved", "allocator", "cpu_trace_reserved",
          f"the model on the same cell's CPU trace is more than {am.LIMITS['cpu_trace_reserved']:.0%} off the CUDA "
          "cell's max_memory_reserved, or has no number",
          f"{am.LIMITS['cpu_trace_reserved']:.0%}: {am.WHY['cpu_trace_reserved']}"),
    Check("allocator.cpu_trace_ga_cost", "allocator", "cpu_trace_ga_cost",
          f"the bf16 GA cost in reserved bytes from the CPU traces is more than {GA_LIMIT:g} B/param from the "
          "measured one, or either is missing",
          f"{GA_LIMIT:g} B/param: {am.WHY['cpu_trace_ga_cost']} (at widths {am.GPU_SIZES[0]} and "
          f"{am.GPU_SIZES[1]} one segment is {SEGMENT:.3f} B/param: the limit is {GA_LIMIT / SEGMENT:.1f} segments)"),
    Check("command.ran", "command", "the meter ran the script and saw its 4 optimizer steps",
          "the command meter exits non-zero, or its result counts other than 4 optimizer steps; cut by the "
          "step's deadline: INCOMPLETE (and the command checks after it are not recorded)",
          "none: a count"),
    Check("command.window", "command", "the script read the counter in the meter's window, at every step",
          "at the script's optimizer post hook for step i the meter had not recorded exactly i steps (its "
          "records file): the script's reading would not be the meter's window (also checked in the dry run)",
          "none: per-optimizer post hooks run before torch's global ones (the meter's, which resets the peak "
          "counter), so at step i the meter has recorded steps 0 to i-1"),
    Check("command.cpu_meter", "command", "the dry run's CPU meter counted tensors",
          "DEV=cpu only: the meter is not cpu-dispatch, or step_peak_bytes is not a positive count", "none"),
    Check("command.on_cuda", "command", "the meter and the script measured on a CUDA device",
          "what ran, not what was asked: the meter is not cuda, its device.type is not cuda or names no GPU, "
          "a step has no CUDA counters, or the script reports its model on another device than cuda",
          "none: names"),
    Check("command.vs_script", "command",
          "step_peak_bytes and each step's peak equal the script's own max_memory_allocated (within 1%)",
          f"a step's cuda_peak_allocated, or step_peak_bytes (max over the measured steps), is more than {TOL} "
          "from the script's own reading; fewer than 2 steps in either",
          f"{TOL}: the same counter in the same window (the script's hook reads it just before the meter's "
          "hook reads and resets it), so equal to the byte is expected; a reading after the reset (zero_grad "
          "and the next step's start) differs by AdamW's foreach temporaries, about 20%"),
    Check("command.nvml", "command", "NVML's used bytes of this GPU are at least the reserved peak",
          "nvml_used_peak_bytes is below cuda_reserved_peak_bytes, or either is absent",
          "none: NVML's used holds everything reserved plus the context"),
    Check("run.finished", "every step", "the step finished",
          "the step crashed (exit other than 0, or no 'done'): FAIL; it ran past its timeout: INCOMPLETE, "
          "killed with every process of its session; the budget was spent before it: SKIP", "none"),
    Check("run.no_leftovers", "every step", "the step left no process running",
          "a process of the step's session, or one below the runner, still ran after the step ended by itself "
          "(it is killed, and counted in leftover_processes)", "none"),
    Check("run.subreaper", "every step", "the runner is a child subreaper",
          "never: a WARN line when prctl(PR_SET_CHILD_SUBREAPER) fails (gVisor, not Linux): a process that "
          "left the step's session and was orphaned is then not found by the runner", "none"),
]
BY_ID = {c.id: c for c in CHECKS}


def entry(check_id: str) -> Check:
    """The listed check ``check_id`` (KeyError: an unlisted check is a programming error)."""
    return BY_ID[check_id]


def record(check_id: str, result: str, detail, **fields) -> dict:
    """A check as a step's JSON keeps it."""
    return {"id": check_id, "check": entry(check_id).name.format(**fields), "result": result,
            "detail": str(detail)[:1500]}


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table() -> str:
    """The markdown table of every check (docs/gpu.md holds it as printed)."""
    lines = ["| id | step | check | fails when | margin, and why there |", "|---|---|---|---|---|"]
    lines += [f"| `{c.id}` | {c.step} | {_cell(c.name)} | {_cell(c.fails)} | {_cell(c.margin)} |" for c in CHECKS]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table())
