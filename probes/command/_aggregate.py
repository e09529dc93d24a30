"""The command meter's records (one JSON-lines file per process) turned into metrics (stdlib only).

The processes that stepped an optimizer are the ranks (``$RANK`` when a launcher set one, else their
order); a process that never stepped (a launcher, a DataLoader worker) changes no number when any
process stepped. Without any step, the metrics are the whole run's (the max over the processes that
imported torch) and the result says so; ``step_*`` metrics are then absent, never zero.
"""
import statistics

from _records import read_records
from _step_numbers import NUMERIC, step_numbers

METRICS = {   # name: (unit, what it is): the table docs/probes.md and `bisector run --help` print
    "step_peak_bytes": ("bytes", "peak live tensor bytes of a measured optimizer step (CPU: exact storage count; "
                                 "CUDA: max_memory_allocated since the step began), max over measured steps"),
    "peak_bytes": ("bytes", "the same peak over the whole run (model build and warm-up included)"),
    "rss_peak_bytes": ("bytes", "peak resident set of a measured step (VmHWM after clear_refs), else of the run"),
    "cuda_reserved_peak_bytes": ("bytes", "CUDA: max_memory_reserved of a measured step"),
    "cuda_step_end_allocated_bytes": ("bytes", "CUDA: memory_allocated at a measured step's end (max)"),
    "cuda_step_end_reserved_bytes": ("bytes", "CUDA: memory_reserved at a measured step's end (max)"),
    "nvml_used_peak_bytes": ("bytes", "CUDA: NVML's used bytes of this process's GPU at a measured step's end (max)"),
    "step_seconds": ("seconds", "median wall time of a measured step"),
    "wall_seconds": ("seconds", "wall time of the whole command"),
    "optimizer_steps": ("count", "optimizer steps seen (warm-up included)"),
    "loss_first": ("", "the loss the program backpropagated in its first optimizer step (summed over micro-steps)"),
    "loss_last": ("", "the same in its last step"),
    "loss_mean": ("", "the mean over every step of each step's backpropagated loss"),
    "grad_norm_first": ("", "L2 norm of the gradients the first optimizer step applied (read before it)"),
    "grad_norm_last": ("", "the same in the last step"),
    "update_norm_last": ("", "L2 norm of the change the last step made to the parameters (CPU, up to 64 MiB of "
                             "parameters)"),
    "nonfinite_steps": ("count", "optimizer steps whose loss or gradients held a NaN or an inf"),
}
WHOLE_RUN = "whole-run metrics only (--metric peak_bytes, rss_peak_bytes or wall_seconds reads them)"
STEP_METRICS = ("step_peak_bytes", "cuda_reserved_peak_bytes", "cuda_step_end_allocated_bytes",
                "cuda_step_end_reserved_bytes", "nvml_used_peak_bytes", "step_seconds")


def read_processes(directory, key):
    """({pid: process}, problems, cut_short) from the records directory: each process as
    ``{"load", "torch", "steps", "end", "errors" (the meter's own), "raised" (uncaught exceptions), "lost"}``;
    ``problems`` names every record that was rejected (never summed), ``cut_short`` counts last lines a kill
    cut short (the lines before them stand)."""
    raw, problems, cut = read_records(directory, key)
    procs = {}
    for pid, records in raw.items():
        proc = {"load": {}, "torch": None, "steps": [], "end": None, "errors": [], "raised": [], "lost": []}
        for record in records:
            kind = record.pop("kind")
            if kind == "step":
                proc["steps"].append(record)
            elif kind == "meter_error":
                proc["errors"].append(str(record.get("error", "?")))
            elif kind == "error":
                proc["raised"].append(record)
            elif kind == "lost":
                proc["lost"].append(str(record.get("why", "?")))
            elif kind in ("load", "torch", "end"):
                proc[kind] = record
        procs[pid] = proc
    return procs, problems, cut


def launchers(procs):
    """The pids of processes that started another process of the command (not by fork) and stepped no
    optimizer: ``torchrun``, ``accelerate launch``, a wrapper script. Never a rank, never what a metric reads."""
    parents = {p["load"].get("ppid") for p in procs.values() if not p["load"].get("forked")}
    return {pid for pid, p in procs.items() if pid in parents and not p["steps"]}


def _peak(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def process_metrics(proc, skip):
    """One process's metrics and, for each metric it cannot give, why."""
    torch, end, steps = proc["torch"] or {}, proc["end"], proc["steps"]
    measured, meter = steps[skip:], str(torch.get("meter") or "").removesuffix(" (fake)") or None   # (fake: the same count)
    out, absent = {"optimizer_steps": len(steps)}, {}
    if not steps and torch.get("optimizer_hooks") is False:
        why = (f"torch {torch.get('version') or '?'} has no global optimizer hooks (they came in torch 2.0), so "
               f"the meter cannot see optimizer steps: {WHOLE_RUN}")
    elif not steps:
        why = f"the command stepped no optimizer (no optimizer.step() seen): {WHOLE_RUN}"
    elif not measured:
        why = f"{len(steps)} optimizer step(s) seen and --measure-skip {skip} leaves none to measure"
    else:
        why = None
    cuda_used = bool(end and end.get("cuda_initialized")) or any("cuda_peak_allocated" in s for s in steps)
    if meter == "cuda" and not cuda_used:
        for name in ("step_peak_bytes", "peak_bytes", *STEP_METRICS[1:5]):
            absent[name] = "the run measures CUDA memory but the command never initialised CUDA (it ran on the CPU)"
    unseen = next((s["uncounted"] for s in steps if s.get("uncounted")), None)
    if unseen:   # a thread's ops the dispatch mode could not see: its bytes are no number
        absent["peak_bytes"] = f"threads: not counted ({unseen})"
        late = next((s["uncounted"] for s in measured if s.get("uncounted")), None)
        if late:
            absent["step_peak_bytes"] = (f"threads: not counted ({late}; a thread started before torch was "
                                         "imported is counted from its first step on: --measure-skip 1 leaves that "
                                         "step out)")
    if why:
        for name in STEP_METRICS:
            absent.setdefault(name, why)
    else:
        key = {"cuda": "cuda_peak_allocated", "cpu-dispatch": "peak_bytes"}.get(meter)
        pairs = {"step_peak_bytes": key, "cuda_reserved_peak_bytes": "cuda_peak_reserved",
                 "cuda_step_end_allocated_bytes": "cuda_end_allocated",
                 "cuda_step_end_reserved_bytes": "cuda_end_reserved", "nvml_used_peak_bytes": "nvml_used"}
        for name, field in pairs.items():
            value = _peak(s.get(field) for s in measured) if field else None
            if value is not None and name not in absent:
                out[name] = value
            else:
                absent.setdefault(name, _why_no(name, meter, end))
        out["step_seconds"] = statistics.median(s["seconds"] for s in measured)
    run_peak = _run_peak(meter, end, steps)
    if run_peak is not None and "peak_bytes" not in absent:
        out["peak_bytes"] = run_peak
    elif "peak_bytes" not in absent:
        absent["peak_bytes"] = _why_no("peak_bytes", meter, end) if end else "the process ended without its exit record"
    rss = _peak(s.get("rss_hwm") for s in measured) if measured else None
    if rss is None and end:
        rss = end.get("max_rss")
    if rss is not None:
        out["rss_peak_bytes"] = rss
    else:
        absent["rss_peak_bytes"] = "the process ended without its exit record (os._exit or killed) and saw no step"
    if end:
        out["wall_seconds"] = end["wall"]
    numbers, not_read = step_numbers(steps, why)   # every step, warm-up included: the numbers the program computed
    out.update(numbers)
    absent.update(not_read)
    return out, absent


def _run_peak(meter, end, steps):
    if meter == "cuda":
        return (end or {}).get("cuda_run_peak_allocated") or _peak(s.get("cuda_peak_allocated") for s in steps)
    if meter == "cpu-dispatch":
        return (end or {}).get("run_peak_bytes") or _peak(s.get("run_peak_bytes") for s in steps)
    return None


def _why_no(name, meter, end=None):
    if meter == "rss":
        return "--meter rss counts RSS and time only (no tensor bytes)"
    if name.startswith(("cuda_", "nvml_")) and meter != "cuda":
        return "a CUDA metric, and the command ran on the CPU"
    if name.startswith("nvml_"):
        said = (end or {}).get("nvml_unavailable")
        return f"NVML was not available to the command's process: {said}" if said else \
            "NVML was not available to the command's processes (pynvml not importable, or no GPU UUID)"
    return "not measured"


def ranks(procs):
    """[(rank, pid, proc)] of the processes that stepped, by rank: ``$RANK`` where a launcher set it, else the
    lowest number no other rank has (a forked child keeps no rank of its parent's)."""
    stepped = [(pid, p) for pid, p in procs.items() if p["steps"]]
    return _numbered(sorted(stepped, key=lambda x: (bool(x[1]["load"].get("forked")), x[0])))


def _numbered(chosen):
    taken, out, rest = set(), [], []
    for pid, p in chosen:
        rank = p["load"].get("rank")
        if not p["load"].get("forked") and str(rank).isdigit() and int(rank) not in taken:
            taken.add(int(rank))
            out.append((int(rank), pid, p))
        else:
            rest.append((pid, p))
    free = (n for n in range(len(chosen) + len(taken) + 1) if n not in taken)
    out += [(next(free), pid, p) for pid, p in rest]
    return sorted(out, key=lambda r: (r[0], r[1]))


def workers(procs):
    """The processes whose numbers are the command's: those that stepped; without any step, those that imported
    torch and are neither a launcher nor a forked child (all that imported torch, if that leaves none)."""
    stepped = ranks(procs)
    if stepped:
        return stepped, True
    with_torch = {pid: p for pid, p in procs.items() if p["torch"]}
    outside = launchers(procs)
    doers = {pid: p for pid, p in with_torch.items() if pid not in outside and not p["load"].get("forked")}
    return _numbered(sorted((doers or with_torch).items())), False


def summarize(procs, skip, wall):
    """(metrics, facts) of the whole command: max over its workers, each rank's own as ``<metric>.rank<N>``."""
    chosen, stepped = workers(procs)
    per_rank, absent = [], {}
    for rank, pid, proc in chosen:
        metrics, why = process_metrics(proc, skip)
        entry = {"rank": rank, "pid": pid, "metrics": metrics, "steps": len(proc["steps"]), "errors": proc["errors"]}
        if proc["load"].get("forked"):
            entry["forked_from"] = proc["load"].get("ppid")
        if proc["lost"]:
            entry["lost_file"] = proc["lost"]
        per_rank.append(entry)
        for k, v in why.items():
            absent.setdefault(k, v)
    metrics = {}
    names = dict.fromkeys(k for r in per_rank for k in r["metrics"])
    for name in names:
        values = [r["metrics"][name] for r in per_rank if name in r["metrics"]]
        if len(values) == len(per_rank):   # a metric some rank lacks is absent, never the max of the rest
            metrics[name] = values[0] if name in NUMERIC[:-1] else max(values)   # a loss: the lowest rank's
            absent.pop(name, None)
    if stepped and len(per_rank) > 1:
        for r in per_rank:
            for name, value in r["metrics"].items():
                metrics[f"{name}.rank{r['rank']}"] = value
    metrics["wall_seconds"] = wall
    absent.pop("wall_seconds", None)
    unseen = [absent[k] for k in ("step_peak_bytes", "peak_bytes") if absent.get(k, "").startswith("threads: not")]
    return metrics, {"ranks": per_rank, "absent": {k: v for k, v in absent.items() if k not in metrics},
                     "threads": unseen[0] if unseen else "counted",
                     "scope": "optimizer steps" if stepped else f"whole run ({_no_steps(p for _, _, p in chosen)})"}


def _no_steps(procs):
    """Why no step was seen: torch without global optimizer hooks (before 2.0), or no optimizer stepped."""
    old = next((p["torch"] for p in procs if (p["torch"] or {}).get("optimizer_hooks") is False), None)
    return f"torch {old.get('version') or '?'} has no global optimizer hooks" if old else "no optimizer step seen"


def failure_line(procs, kills=None):
    """Why a command that failed failed, as one line (None when the records cannot tell): the kernel's OOM
    killer where the cgroup's count rose; else the first uncaught exception (its traceback's last line) of a
    process that is no launcher; else a rank that ended without finishing. Never a launcher's own summary."""
    outside = launchers(procs)
    if kills and kills[0] is not None and kills[1] is not None and kills[1] > kills[0]:
        return (f"out of memory: the kernel's OOM killer killed a process of the command (the cgroup's oom_kill "
                f"count went {kills[0]} -> {kills[1]})")
    raised = sorted((r.get("t") or 0, pid, r) for pid, p in procs.items() if pid not in outside for r in p["raised"])
    if raised:
        _, pid, first = raised[0]
        line = str(first.get("line"))[:240]
        if len([q for q in procs if q not in outside]) == 1:
            return line   # one process: its error is the reason, as the program printed it
        return f"{line} ({_who(procs, pid)}: the first error among the command's processes)"
    gone = [pid for pid, p in sorted(procs.items()) if pid not in outside and p["torch"] and p["end"] is None
            and not p["load"].get("forked")]
    if gone:
        return (f"{_who(procs, gone[0])} of the command ended without finishing and without a Python error "
                "(killed by a signal, or os._exit)")
    return None


def _who(procs, pid):
    rank = procs[pid]["load"].get("rank")
    return f"rank {rank}, pid {pid}" if str(rank).isdigit() else f"pid {pid}"
