"""gpu_first step ``allocator_model``: the CUDA caching allocator model against the real allocator.

    python3 acceptance/gpu_first/allocator_model.py [--out DIR] [--device auto|cuda|cpu]

Planned time on the GPU: 120 s (8 CUDA cells, each in a fresh interpreter, about 6 s apiece; the same
8 cells on the CPU under the probe's meter, about 70 s). Needs the image's python3 only: the stdlib,
torch, and the probe's own pure modules (probes/ga_memory/_allocator_model: the allocator model; probes/_meters: the CPU meter).

Every cell (width x precision x GA) trains a torch-only causal LM (embedding, pre-LN attention and
MLP blocks, LM head, SGD): one warm-up optimizer step, then the measured step.
  cuda   a fresh interpreter records the caching allocator's own history
         (``torch.cuda.memory._record_memory_history``) and measures ``max_memory_reserved`` and
         ``max_memory_allocated`` over the measured step; the model replays that very trace: how
         faithful the model is (checks ``cuda_trace_reserved`` within 2%, ``cuda_trace_allocated`` 1%).
  cpu    the same cell on the CPU under the probe's CPU meter; its trace replayed by the model is
         the estimate a CPU user gets, compared with the CUDA cell's ``max_memory_reserved``
         (``cpu_trace_reserved`` within 20%; ``cpu_trace_ga_cost``: the bf16 GA cost in reserved
         bytes per parameter within 0.3 B/param of the measured one, or within MIN_SEGMENTS 20 MiB
         segments over the widths' parameter difference where that is more: ``ga_cost_limit``; the
         gpu_first step runs widths 1024 and 2560, where one segment is 0.072 B/param).
Each cell also proves its precision (the logits' dtype). Writes (after every cell, so a kill keeps the
finished ones: ``complete`` false and no checks until the last) ``DIR/allocator_model.json`` (DIR:
--out, else $OUT, else .) with every number, both errors and the checks (PASS / FAIL / SKIP), the
traces of both devices to ``DIR/allocator_model_traces.json`` (to replay and refine the model later,
without a GPU), and one log line per cell on stdout. Without CUDA (``DEV=cpu``, ``--device cpu``) the CUDA half and the
checks needing it are SKIP and the CPU half runs: the CI dry run. Exit 0 when no check failed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "probes", "ga_memory")   # and probes/ (_meters)
sys.path[:0] = [PROBE, os.path.dirname(PROBE), HERE]

from allocator_cells import cpu_cell, cuda_cell, trace_from_snapshot  # noqa: E402,F401 (tests read it here)

PLANNED_SECONDS = 120
GPU_SIZES, GPU_LAYERS, GPU_VOCAB = [1024, 2560], 4, 8192   # what the gpu_first step runs on a GPU
LIMITS = {"cuda_trace_reserved": 0.02, "cuda_trace_allocated": 0.01, "cpu_trace_reserved": 0.20,
          "cpu_trace_ga_cost": 0.3}
CELL_TIMEOUT = 180
SEGMENT_BYTES = 20 << 20   # the caching allocator's large segment (kLargeBuffer): what one block between 1 and
                           # 10 MiB more or less can add to the reserved peak
MIN_SEGMENTS = 3           # cpu_trace_ga_cost's limit is never under this many segments over the widths
WHY = {"cuda_trace_reserved": "the model replays the allocator's own history of that cell: only its rules can "
                              "differ, and right rules place every segment as CUDA did; 2% is less than one 20 "
                              "MiB segment of the smaller cell (about 600 MB reserved at width 1024 by the CPU "
                              "estimate: a segment is 3.5%), so one segment placed wrongly fails it: the replay's "
                              "exactness is what this check asks",
       "cuda_trace_allocated": "the same history's allocated bytes are sums of its own block sizes: exact "
                               "expected, 1% for the block rounding the model may place differently",
       "cpu_trace_reserved": "the CPU trace lacks what only CUDA allocates (library workspaces, the "
                             "allocator's stream bookkeeping): 20% is the estimate a CPU user is promised",
       "cpu_trace_ga_cost": "a GA cost is a slope over the two widths: one 20 MiB segment more or less is "
                            "20 MiB over their parameter difference, so the limit is never under "
                            f"{MIN_SEGMENTS} segments (widths 1024 and 2560: one segment 0.072 B/param, "
                            "the limit 0.3 = 4.1 segments; 1024 and 1536 would make one 0.294)"}


def n_params(hidden, layers, vocab) -> int:
    """The parameters of :func:`build_lm` (12h^2 + 13h a block, embedding and head vocab x h, final LN)."""
    return layers * (12 * hidden * hidden + 13 * hidden) + 2 * vocab * hidden + 2 * hidden


def segment_bpp(sizes, layers, vocab):
    """One SEGMENT_BYTES over the parameter difference of the extreme widths (B/param), or None."""
    if len(sizes) < 2:
        return None
    return SEGMENT_BYTES / (n_params(max(sizes), layers, vocab) - n_params(min(sizes), layers, vocab))


def ga_cost_limit(sizes, layers, vocab) -> float:
    """cpu_trace_ga_cost's limit: 0.3 B/param, or MIN_SEGMENTS segments where the widths make that more."""
    one = segment_bpp(sizes, layers, vocab)
    return LIMITS["cpu_trace_ga_cost"] if one is None else max(LIMITS["cpu_trace_ga_cost"], MIN_SEGMENTS * one)


# --- comparing ----------------------------------------------------------------------------
def rel(estimate, measured):
    return None if estimate is None or not measured else (estimate - measured) / measured


def ga_cost(cells, side, key, precision="bf16"):
    """GA=max minus GA=min of ``key`` per parameter, fitted over the widths (a ratio with one width)."""
    by = {(c["hidden"], c["ga"]): c.get(side) or {} for c in cells if c["precision"] == precision}
    gas = sorted({g for _, g in by})
    if len(gas) < 2:
        return None
    points = []
    for h in sorted({h for h, _ in by}):
        hi, lo = by.get((h, gas[-1]), {}), by.get((h, gas[0]), {})
        if hi.get(key) is None or lo.get(key) is None or not lo.get("n_params"):
            return None
        points.append((lo["n_params"], hi[key] - lo[key]))
    if len(points) == 1:
        return points[0][1] / points[0][0]
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def check(name, values, limit, skip_why=None) -> dict:
    """PASS when every value is within ``limit`` (absolute); FAIL past it or where a cell has no number
    (its CUDA run failed, the model found no estimate); SKIP without CUDA."""
    if skip_why:
        return {"name": name, "status": "SKIP", "detail": skip_why}
    missing = sum(v is None for v in values)
    values = [v for v in values if v is not None]
    if missing or not values:
        return {"name": name, "status": "FAIL", "detail": f"{missing} of {missing + len(values)} without a number"}
    worst = max(values, key=abs)
    status = "PASS" if abs(worst) <= limit else "FAIL"
    return {"name": name, "status": status, "detail": f"worst {worst:+.4f} (limit {limit}) over {len(values)}"}


def checks(cells, cuda_why, ga_limit=None) -> list:
    cuda, cpu = [c.get("cuda") or {} for c in cells], [c["cpu"] for c in cells]
    proved = [c.get("precision_proved") for c in (cpu if cuda_why else cuda + cpu)]
    out = [{"name": "precision_proved", "status": "PASS" if proved and all(proved) else "FAIL",
            "detail": f"{sum(bool(p) for p in proved)} of {len(proved)} cells ran in their precision"}]
    for name, side, key in (("cuda_trace_reserved", cuda, "reserved_error"),
                            ("cuda_trace_allocated", cuda, "allocated_error"),
                            ("cpu_trace_reserved", cpu, "reserved_error")):
        out.append(check(name, [c.get(key) for c in side], LIMITS[name], cuda_why))
    measured, estimated = ga_cost(cells, "cuda", "max_reserved"), ga_cost(cells, "cpu", "est_reserved")
    diff = None if measured is None or estimated is None else estimated - measured
    out.append(check("cpu_trace_ga_cost", [diff], LIMITS["cpu_trace_ga_cost"] if ga_limit is None else ga_limit,
                     cuda_why))
    return out


def _pct(value) -> str:
    return "no number" if value is None else f"{value:+.2%}"


def _cell_line(c) -> str:
    """The log line of a CUDA cell: any of its numbers may be missing (no estimate, a failed replay)."""
    if c.get("error"):
        return str(c["error"])[:300]
    return (f"CUDA max reserved {c.get('max_reserved')} B, model on its trace {c.get('model_reserved')} B "
            f"({_pct(c.get('reserved_error'))}), allocated {_pct(c.get('allocated_error'))}")


def write(out, cells, planned, cuda_why, base, started, ga_limit) -> dict:
    """allocator_model.json and the traces, as they stand: after every cell (``complete`` false, no
    checks yet), then once more with the checks. A kill keeps every finished cell."""
    complete = len(cells) == planned
    result = {**base, "complete": complete, "cells_planned": planned, "cells_done": len(cells),
              "limits": {**LIMITS, "cpu_trace_ga_cost": ga_limit}, "why": WHY,
              "ga_cost_bf16": {"cuda_measured_reserved": ga_cost(cells, "cuda", "max_reserved"),
                               "cuda_trace_model": ga_cost(cells, "cuda", "model_reserved"),
                               "cpu_trace_model": ga_cost(cells, "cpu", "est_reserved"),
                               "cpu_live": ga_cost(cells, "cpu", "live_peak")},
              "cells": [{**c, **{side: {k: v for k, v in (c.get(side) or {}).items() if k != "trace"}
                                 for side in ("cuda", "cpu") if c.get(side) is not None}} for c in cells],
              "checks": checks(cells, cuda_why, ga_limit) if complete else [],
              "seconds": round(time.perf_counter() - started, 1)}
    os.makedirs(out, exist_ok=True)
    traces = [{k: cell[k] for k in ("hidden", "precision", "ga")}
              | {side: (cell.get(side) or {}).get("trace") for side in ("cuda", "cpu")} for cell in cells]
    for name, data, kw in (("allocator_model_traces.json", traces, {"separators": (",", ":")}),
                           ("allocator_model.json", result, {"indent": 1})):
        path = os.path.join(out, name)
        with open(f"{path}.tmp", "w") as fh:
            json.dump(data, fh, **kw)
        os.replace(f"{path}.tmp", path)
    return result


# --- driver -------------------------------------------------------------------------------
def plan(args) -> list:
    return [{"hidden": h, "precision": p, "ga": g, "layers": args.layers, "heads": args.heads,
             "vocab": args.vocab, "seq_len": args.seq_len, "batch": args.batch}
            for h in args.sizes for p in args.precisions for g in (1, 2)]


def cell_timeout() -> float:
    """CELL_TIMEOUT, cut to the gpu_first step's deadline ($GF_STEP_DEADLINE) less 5 s to record it."""
    deadline = os.environ.get("GF_STEP_DEADLINE")
    return CELL_TIMEOUT if not deadline else max(1.0, min(CELL_TIMEOUT, float(deadline) - time.time() - 5))


def run_cuda(cell) -> dict:
    """The CUDA cell in a fresh interpreter (the allocator starts empty, as in an isolated probe cell),
    and the model's replay of its trace."""
    from _allocator_model.conf import conf_from_env, parse_alloc_conf
    from _allocator_model.replay import replay
    from _allocator_model.trace import Trace

    timeout = cell_timeout()
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--cell", json.dumps(cell)],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:   # cut short by the step's deadline: out of time, not a fault
        return {"error": f"cell timed out after {timeout:.0f}s", "cut": timeout < CELL_TIMEOUT}
    if proc.returncode != 0:
        return {"error": f"cell exited {proc.returncode}: {proc.stderr[-1500:]}"}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    trace = out["trace"]
    model = replay(Trace.from_json(trace), parse_alloc_conf(conf_from_env(os.environ)))
    out.update(events=len(trace["events"]), model_reserved=model.get("est_reserved_peak_bytes"),
               model_allocated=model.get("est_allocated_peak_bytes"), model_error=model.get("error"))
    out["reserved_error"] = rel(out["model_reserved"], out["max_reserved"])
    out["allocated_error"] = rel(out["model_allocated"], out["max_allocated"])
    return out


def cuda_unusable(device):
    import torch

    if device == "cpu":
        return "the CPU was asked for (DEV=cpu / --device cpu): no CUDA reference"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    return None


def log(cell, line):
    print(f"[allocator_model] {cell['precision']} GA={cell['ga']} h{cell['hidden']}: {line}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"),
                    default="cpu" if os.environ.get("DEV") == "cpu" else "auto")
    ap.add_argument("--sizes", type=lambda t: [int(x) for x in t.split(",")], default=[1024, 1536])
    ap.add_argument("--precisions", type=lambda t: t.split(","), default=["fp32", "bf16"],
                    help="precisions of the cells (gpu_first's step measures bf16 only: half the cells)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--cell", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cell:  # child: one CUDA cell, its numbers as the last line of stdout
        print(json.dumps(cuda_cell(json.loads(args.cell))))
        return 0
    import torch

    started = time.perf_counter()
    cuda_why = cuda_unusable(args.device)
    ga_limit = ga_cost_limit(args.sizes, args.layers, args.vocab)
    base = {"step": "allocator_model", "planned_seconds": PLANNED_SECONDS, "torch": torch.__version__,
            "cuda_skipped": cuda_why, "allocator_settings": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "device": torch.cuda.get_device_name(0) if cuda_why is None else "cpu",
            "segment_bpp": segment_bpp(args.sizes, args.layers, args.vocab)}
    todo, cells = plan(args), []
    result = write(args.out, cells, len(todo), cuda_why, base, started, ga_limit)
    for cell in todo:
        record = dict(cell)
        if cuda_why is None:
            record["cuda"] = run_cuda(cell)
            log(cell, _cell_line(record["cuda"]))
            if record["cuda"].get("cut"):   # the step's deadline: the finished cells stand, complete stays false
                break
        record["cpu"] = cpu_cell(torch, cell)
        record["precision_proved"] = record["cpu"]["precision_proved"]
        reference = (record.get("cuda") or {}).get("max_reserved")
        record["cpu"]["reserved_error"] = rel(record["cpu"]["est_reserved"], reference)
        cpu = record["cpu"]
        log(cell, f"CPU live peak {cpu.get('live_peak')} B, estimated reserved {cpu.get('est_reserved')} B"
            + (f" ({_pct(cpu['reserved_error'])} vs CUDA)" if cpu["reserved_error"] is not None else ""))
        cells.append(record)
        result = write(args.out, cells, len(todo), cuda_why, base, started, ga_limit)
    for c in result["checks"]:
        print(f"[allocator_model] {c['status']} {c['name']}: {c['detail']}", flush=True)
    return 1 if any(c["status"] == "FAIL" for c in result["checks"]) else 0


if __name__ == "__main__":
    sys.exit(main())
