"""The one-shot GPU check of the CUDA path: `python bench/gpu_check.py [--out DIR] [--quick]`.

Runs the built-in ga_memory probe on the GPU the way the orchestrator does (a subprocess, the
result in $BISECTOR_RESULT, `BISECTOR_DEVICE=cuda`) and checks what CPU tests cannot:

1. preflight: device, capability, MIG, NVML importable here and mapped to the same GPU by UUID;
2. the default probe on CUDA in fp32, bf16 and fp16 with GA 1 and 2, twice: no cell errors,
   meter `cuda`, per-cell allocated peaks identical between the runs;
3. the peak cross-check: resetting the counters only at the window's start gives the same step
   peaks as the maximum over per-phase resets;
4. the CPU meter and the CUDA meter on the same sizes: their GA-cost slopes side by side;
5. the Trainer loop on CUDA;
6. a forced out-of-memory (`set_per_process_memory_fraction`): every cell, then only the largest;
7. the seed at its own scale: pythia-1.4b and llama-7b from config (random weights, built on the
   GPU), Trainer, bf16 vs fp32, GA 1 vs 2, checkpointing, SGD, batch 1, 8 tokens; our bytes/param
   next to the seed's, allocated, reserved and NVML device-wide.

Needs only the standard library here and torch / accelerate / transformers (nvidia-ml-py for
NVML) in the interpreter given by --python (default: this one). Writes gpu_check.json and
gpu_check.md into --out (default $OUT, else ./gpu-check) and prints the table last. Exit 0 when
every check passed, 1 otherwise. Budget: under 8 minutes on one H200.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "probes", "ga_memory", "__main__.py")
MIB = 1 << 20
# What the seed report measured (NVML, bytes/param of GA=2 over GA=1), bf16 mixed vs fp32
SEED = {"pythia-1.4b": {"bf16": 0.86, "fp32": 0.29}, "llama-7b": {"bf16": 1.54, "fp32": 0.18}}
SEED_ARGS = ["--loop", "trainer", "--precisions", "fp32,bf16", "--ga", "1,2", "--optimizer", "sgd",
             "--seq-len", "8", "--batch", "1", "--gradient-checkpointing", "--no-attribution"]


def probe(python, *args, timeout=600):
    """Run the probe on CUDA; returns (exit code, result dict or None, seconds, stderr tail)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        env = {**os.environ, "BISECTOR_RESULT": out, "BISECTOR_DEVICE": "cuda", "PYTHONUNBUFFERED": "1"}
        start = time.perf_counter()
        try:
            proc = subprocess.run([python, PROBE, *args], env=env, capture_output=True, text=True, timeout=timeout)
            code, err = proc.returncode, proc.stderr[-2000:]
        except subprocess.TimeoutExpired:
            code, err = -1, f"timed out after {timeout}s"
        seconds = time.perf_counter() - start
        result = json.load(open(out)) if os.path.exists(out) else None
    return code, result, round(seconds, 1), err


class Report:
    """Checks and numbers, printed as they come and written as JSON + markdown at the end."""

    def __init__(self):
        self.checks, self.tables, self.facts = [], {}, {}

    def check(self, name, ok, detail=""):
        self.checks.append({"check": name, "ok": bool(ok), "detail": str(detail)[:600]})
        print(f"[{'PASS' if ok else 'FAIL'}] {name}: {detail}", flush=True)
        return ok

    def table(self, name, header, rows):
        self.tables[name] = {"header": header, "rows": rows}

    def markdown(self):
        out = ["# GPU check", "", "| check | result | detail |", "|---|---|---|"]
        out += [f"| {c['check']} | {'pass' if c['ok'] else '**FAIL**'} | {c['detail']} |" for c in self.checks]
        for name, t in self.tables.items():
            out += ["", f"## {name}", "", "| " + " | ".join(t["header"]) + " |", "|" + "---|" * len(t["header"])]
            out += ["| " + " | ".join(str(x) for x in row) + " |" for row in t["rows"]]
        return "\n".join(out) + "\n"


PREFLIGHT = r"""
import json, torch
info = {"available": torch.cuda.is_available(), "torch": torch.__version__, "cuda": torch.version.cuda}
if info["available"]:
    p = torch.cuda.get_device_properties(0)
    info.update(name=p.name, capability=f"{p.major}.{p.minor}", total=p.total_memory, uuid=str(getattr(p, "uuid", "")))
try:
    import pynvml
    pynvml.nvmlInit()
    info["driver"] = pynvml.nvmlSystemGetDriverVersion()
    info["driver"] = info["driver"].decode() if isinstance(info["driver"], bytes) else info["driver"]
    u = info.get("uuid", "")
    for spelling in ([u] if u.startswith(("GPU-", "MIG-")) else [f"GPU-{u}", f"MIG-{u}"]):
        try:
            h = pynvml.nvmlDeviceGetHandleByUUID(spelling)
        except Exception:
            continue
        name = pynvml.nvmlDeviceGetName(h)
        info["nvml_name"] = name.decode() if isinstance(name, bytes) else name
        info["nvml_uuid"] = spelling
        try:
            info["mig"] = "on" if pynvml.nvmlDeviceGetMigMode(h)[0] else "off"
        except Exception as exc:
            info["mig"] = f"unknown ({exc})"
        break
except Exception as exc:
    info["nvml_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(info))
"""


def preflight(python, r):
    proc = subprocess.run([python, "-c", PREFLIGHT], capture_output=True, text=True, timeout=120)
    info = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr[-500:]}
    r.facts["preflight"] = info
    r.check("CUDA available", info.get("available"), f"{info.get('name')} cc {info.get('capability')}, "
            f"torch {info.get('torch')}, CUDA {info.get('cuda')}")
    r.check("NVML importable in the probe's interpreter", "driver" in info, info.get("driver") or info.get("nvml_error"))
    r.check("NVML maps torch's device 0 to the same GPU by UUID", info.get("nvml_name") is not None and info.get("nvml_name") == info.get("name"),
            f"{info.get('nvml_uuid')} -> {info.get('nvml_name')}; MIG {info.get('mig')}")
    return bool(info.get("available"))


def _peaks(result):
    return {f"{c['precision']}.ga{c['ga']}.h{c['hidden']}": c.get("peak_bytes") for c in result["cells"]}


def default_twice(python, r, quick):
    args = ["--precisions", "fp32,bf16,fp16", "--ga", "1,2"] + (["--sizes", "64,128"] if quick else [])
    runs = [probe(python, *args) for _ in range(2)]
    for i, (code, result, seconds, err) in enumerate(runs):
        errors = [c.get("error") for c in (result or {}).get("cells", []) if c.get("error")]
        ok = code == 0 and result and result.get("meter") == "cuda" and not errors
        r.check(f"default probe on CUDA, run {i + 1}", ok, f"exit {code}, {seconds}s, meter "
                f"{(result or {}).get('meter')}, cell errors {errors[:2] or 'none'} {'' if ok else err[-300:]}")
    if all(x[1] for x in runs):
        a, b = _peaks(runs[0][1]), _peaks(runs[1][1])
        r.check("per-cell allocated peaks identical between the two runs", a == b,
                f"{sum(a[k] == b.get(k) for k in a)}/{len(a)} cells equal")
        nvml = runs[0][1]["device"].get("nvml")
        r.check("the result names its NVML device (or says why not)", bool(nvml), nvml)
        skipped = [c.get("skipped_steps") for c in runs[0][1]["cells"] if c["precision"] == "fp16"]
        r.facts["fp16_skipped_warmups"] = skipped
    return runs[0][1]


def peak_cross_check(python, r):
    args = ["--precisions", "fp32,bf16", "--sizes", "64,128"]
    (_, phase, _, _), (_, window, _, _) = probe(python, *args), probe(python, *args, "--cuda-reset", "window")
    if phase and window:
        a, b = _peaks(phase), _peaks(window)
        r.check("step peak: reset only at the window's start == max over per-phase resets", a == b,
                {k: (a[k], b.get(k)) for k in a if a[k] != b.get(k)} or "all equal")


def cpu_vs_cuda(python, r, cuda_result):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cpu.json")
        env = {**os.environ, "BISECTOR_RESULT": out, "BISECTOR_DEVICE": "cpu"}
        subprocess.run([python, PROBE, "--precisions", "fp32,bf16", "--device", "cpu"], env=env,
                       capture_output=True, timeout=600)
        cpu = json.load(open(out)) if os.path.exists(out) else None
    _, cuda, _, _ = probe(python, "--precisions", "fp32,bf16")
    if not (cpu and cuda):
        r.check("CPU and CUDA meters on the same sizes", False, "a run failed")
        return
    names = ("ga_cost_bytes_per_param", "fp32_ga_cost_bytes_per_param", "mixed_cost_bytes_per_param",
             "ga_excess_bytes_per_param")
    rows = [[n, f"{cpu['metrics'].get(n, float('nan')):.3f}", f"{cuda['metrics'].get(n, float('nan')):.3f}"]
            for n in names]
    r.table("CPU meter vs CUDA meter (default sizes, accelerate loop)", ["metric", "cpu-dispatch", "cuda"], rows)
    r.check("CPU and CUDA meters on the same sizes", True, "; ".join(f"{a}: {b} vs {c}" for a, b, c in rows))


def trainer_on_cuda(python, r):
    code, result, seconds, err = probe(python, "--loop", "trainer", "--precisions", "fp32,bf16")
    errors = [c.get("error") for c in (result or {}).get("cells", []) if c.get("error")]
    m = (result or {}).get("metrics", {})
    r.check("Trainer loop on CUDA", code == 0 and not errors, f"{seconds}s; GA excess "
            f"{m.get('ga_excess_bytes_per_param', float('nan')):.3f} B/param; errors {errors[:1] or 'none'} {err[-200:] if code else ''}")


def forced_oom(python, r, default_result):
    code, result, _, _ = probe(python, "--sizes", "64,128", "--cuda-memory-fraction", "0.000001")
    r.check("whole OOM: every cell out of memory, nothing measured (exit 3)", code == 3 and result and
            len(result.get("oom_cells", [])) == len(result.get("cells", [])), f"exit {code}, oom_cells "
            f"{len((result or {}).get('oom_cells', []))} of {len((result or {}).get('cells', []))}")
    if not default_result:
        return
    total = default_result["device"].get("total_bytes") or 1
    peaks = {k: v for k, v in _peaks(default_result).items() if v}
    largest = max(peaks.values())
    below = max(v for v in peaks.values() if v < largest)
    fraction = (below + (largest - below) / 2) / total
    code, result, _, _ = probe(python, "--cuda-memory-fraction", f"{fraction:.8f}", "--precisions", "fp32,bf16,fp16")
    oom = (result or {}).get("oom_cells", [])
    r.check("partial OOM: the largest cell(s) reported in oom_cells, the rest measured",
            code == 0 and oom and len(oom) < len(result.get("cells", [])), f"fraction {fraction:.6f}: oom {oom}")


def seed_scale(python, r):
    rows = []
    for shape, seed in SEED.items():
        code, result, seconds, err = probe(python, "--model-config", shape, *SEED_ARGS, timeout=900)
        cells = {(c["precision"], c["ga"]): c for c in (result or {}).get("cells", []) if "peak_bytes" in c}
        if len(cells) != 4:
            r.check(f"seed scale {shape}", False, f"exit {code}, {seconds}s: {err[-400:]}")
            continue
        n = next(iter(cells.values()))["n_params"]
        for prec in ("bf16", "fp32"):
            one, two = cells[prec, 1], cells[prec, 2]
            per = lambda key: (two.get(key, 0) - one.get(key, 0)) / n  # noqa: E731
            rows.append([shape, prec, f"{seed[prec]:.2f}", f"{per('peak_bytes'):.3f}", f"{per('reserved_peak_bytes'):.3f}",
                         f"{per('nvml_device_used_at_marks_max_bytes'):.3f}", f"{n:,}", seconds])
        r.check(f"seed scale {shape}", True, f"{seconds}s, {n:,} parameters")
    r.table("The seed at its own scale: GA=2 minus GA=1, bytes per parameter (Trainer, SGD, batch 1, 8 tokens)",
            ["model", "precision", "seed (NVML)", "ours: allocated peak", "ours: reserved peak",
             "ours: NVML device used", "parameters", "seconds"], rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="interpreter with torch, accelerate, transformers")
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu-check")
    ap.add_argument("--quick", action="store_true", help="smaller default-probe sizes")
    ap.add_argument("--skip-seed", action="store_true", help="leave out the seed-scale models")
    args = ap.parse_args()
    r, start = Report(), time.perf_counter()
    if preflight(args.python, r):
        default = default_twice(args.python, r, args.quick)
        peak_cross_check(args.python, r)
        cpu_vs_cuda(args.python, r, default)
        trainer_on_cuda(args.python, r)
        forced_oom(args.python, r, default)
        if not args.skip_seed:
            seed_scale(args.python, r)
    r.facts["seconds"] = round(time.perf_counter() - start, 1)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_check.json"), "w") as fh:
        json.dump({"checks": r.checks, "tables": r.tables, "facts": r.facts}, fh, indent=1)
    text = r.markdown()
    with open(os.path.join(args.out, "gpu_check.md"), "w") as fh:
        fh.write(text)
    print(text)
    return 0 if all(c["ok"] for c in r.checks) else 1


if __name__ == "__main__":
    sys.exit(main())
