"""Fake mode against real, side by side in one run: the same ga_memory cells, their bytes, wall time and peak RSS.

1. Widths this machine holds for real (default 256, 1024, 2048, 2560; Trainer loop, 4 layers, vocab 8192, bf16 and
   fp32, GA 1 and 2): each width is one probe run real and one fake, one after the other; every cell's bytes must
   be equal (the step's peak, its phases, sites and allocator estimates; with ``--all-fields`` every field of the
   cell, which holds on the default job's transformers 4.32), and the table prints each side's wall time and peak
   RSS (the probe and its worker, from ``wait4``) with their ratios.
2. The seed's models, fake only (``--seed-models``): pythia-1.4b's and llama-7b's four Trainer cells, against the
   real CPU run of pythia-1.4b recorded in docs/gpu.md (1.858 / 0.294 B/param, 705 s, 13.47 GiB; not rerun here:
   it takes 12 minutes and more memory than a shared machine should give) and the seed's NVML numbers.

    python bench/fake_vs_real.py [--python ENV/bin/python] [--widths 256,1024] [--seed-models] [--all-fields]

``--python``: the interpreter the probe runs with (a candidate environment's, e.g. the one ``bisector probe --with
accelerate==0.22.0`` built; default this one). Real cells use one worker, so a real run's RSS is one cell's.
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
SCRIPT = os.path.join(ROOT, "probes", "ga_memory", "__main__.py")
WIDE = ["--loop", "trainer", "--layers", "4", "--heads", "16", "--vocab", "8192", "--workers", "1"]
# docs/gpu.md: the real CPU run of pythia-1.4b's four Trainer cells, its worker's peak RSS (14.1 GiB: the estimate)
SEED_REAL = {"pythia-1.4b": {"ga_cost_bytes_per_param": 1.858, "fp32_ga_cost_bytes_per_param": 0.294,
                             "wall_s": 705.0, "rss_gib": 13.47}}
SEED_NVML = {"pythia-1.4b": (0.86, 0.29), "llama-7b": (1.54, 0.18)}
NOT_BYTES = ("seconds", "meter", "fake_reads_answered")
COUNTS = ("storages_seen", "dtype_bytes")   # equal on transformers 4.32, not on 5 (tests/slow/test_fake_exact.py)
GIB = 1 << 30


def run_probe(python, args):
    """(wall seconds, peak RSS bytes of the probe and its workers, from ``wait4``, result)."""
    with tempfile.TemporaryDirectory() as tmp:
        out, err = os.path.join(tmp, "result.json"), os.path.join(tmp, "stderr")
        env = {**os.environ, "BISECTOR_RESULT": out, "BISECTOR_DEVICE": "cpu"}
        start = time.perf_counter()
        with open(err, "w") as stderr:
            proc = subprocess.Popen([python, SCRIPT, *args], env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)   # the child's own and its reaped workers' largest RSS
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if not os.path.exists(out):
            with open(err) as fh:
                sys.exit(f"probe {' '.join(args)} wrote no result (exit {proc.returncode}):\n{fh.read()[-3000:]}")
        with open(out) as fh:
            return wall, usage.ru_maxrss * 1024, json.load(fh)


def _bytes(cell, all_fields):
    drop = NOT_BYTES + (() if all_fields else COUNTS)
    out = {k: v for k, v in cell.items() if k not in drop}
    if not all_fields and "allocator_model" in out:
        model = {k: v for k, v in out["allocator_model"].items() if k != "events"}
        model["at_peak"] = {k: v for k, v in model.get("at_peak", {}).items() if k != "largest_free_block_bytes"}
        out["allocator_model"] = model
    return out


def widths(python, sizes, all_fields):
    print(f"{'width':>6} {'params':>12} {'peak (bf16 GA=2)':>17}  {'real wall':>9} {'real RSS':>9}  "
          f"{'fake wall':>9} {'fake RSS':>9}  {'wall x':>6} {'RSS x':>6}  bytes")
    for width in sizes:
        args = [*WIDE, "--sizes", str(width)]
        real_s, real_rss, real = run_probe(python, args)   # one run at a time: the RSS is one process tree's
        fake_s, fake_rss, fake = run_probe(python, [*args, "--fake"])
        same = all(_bytes(a, all_fields) == _bytes(b, all_fields) for a, b in zip(real["cells"], fake["cells"]))
        same = same and len(real["cells"]) == len(fake["cells"]) and real["metrics"] == fake["metrics"]
        peak = max(c.get("peak_bytes", 0) for c in real["cells"])
        params = real["metrics"].get(f"n_params.h{width}", 0)
        print(f"{width:>6} {params:>12,.0f} {peak / GIB:>14.3f} GiB  {real_s:>8.1f}s {real_rss / GIB:>6.2f} GiB  "
              f"{fake_s:>8.1f}s {fake_rss / GIB:>6.2f} GiB  {fake_s / real_s:>6.2f} {fake_rss / real_rss:>6.2f}  "
              f"{'equal' if same else 'DIFFERENT'}{' (every field)' if same and all_fields else ''}", flush=True)


def seed_models(python):
    print("\nThe seed's models, fake mode, Trainer loop, bf16 and fp32, GA 1 and 2 (B/param):")
    print(f"{'model':<12} {'params':>14} {'GA cost':>8} {'fp32 GA':>8} {'est. reserved':>14} {'wall':>7} "
          f"{'peak RSS':>9}  {'real CPU (recorded)':<34} seed NVML")
    for name in ("pythia-1.4b", "llama-7b"):
        wall, rss, result = run_probe(python, ["--model-config", name, "--loop", "trainer", "--fake", "--timings"])
        m = result["metrics"]
        params = next(v for k, v in m.items() if k.startswith("n_params."))
        est = (f"{m.get('est_reserved_ga_cost_bytes_per_param', 0):.3f} / "
               f"{m.get('est_reserved_fp32_ga_cost_bytes_per_param', 0):.3f}")
        real = SEED_REAL.get(name)
        recorded = (f"{real['ga_cost_bytes_per_param']:.3f} / {real['fp32_ga_cost_bytes_per_param']:.3f}, "
                    f"{real['wall_s']:.0f} s, {real['rss_gib']:.1f} GiB" if real else "does not fit here")
        nvml = "{:.2f} / {:.2f}".format(*SEED_NVML[name])
        costs = f"{m['ga_cost_bytes_per_param']:>8.3f} {m['fp32_ga_cost_bytes_per_param']:>8.3f}"
        print(f"{name:<12} {params:>14,.0f} {costs} {est:>14} {wall:>6.0f}s {rss / GIB:>5.2f} GiB  {recorded:<34} "
              f"{nvml}", flush=True)
        if real:
            print(f"{'':<12} fake / real: wall {wall / real['wall_s']:.2f}x, RSS {rss / GIB / real['rss_gib']:.3f}x")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=sys.executable, help="the interpreter the probe runs with")
    p.add_argument("--widths", default="256,1024,2048,2560", help="widths measured real and fake ('' for none)")
    p.add_argument("--seed-models", action="store_true", help="also pythia-1.4b and llama-7b, fake only")
    p.add_argument("--all-fields", action="store_true", help="cells equal in every field, storage counts too")
    args = p.parse_args(argv)
    versions = subprocess.run([args.python, "-c", "import torch, transformers, accelerate; print(torch.__version__, "
                               "transformers.__version__, accelerate.__version__)"], capture_output=True, text=True)
    print(f"torch / transformers / accelerate: {versions.stdout.strip()}; load {os.getloadavg()[0]:.1f}")
    sizes = [int(w) for w in args.widths.split(",") if w.strip()]
    if sizes:
        widths(args.python, sizes, args.all_fields)
    if args.seed_models:
        seed_models(args.python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
