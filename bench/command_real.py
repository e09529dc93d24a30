"""Your own program, unchanged (``bisector run ... -- CMD``), on the real package index: the issue's
"done when" bisects, one after another, each printing what it names and the values at its boundary.

    python bench/command_real.py [--accelerate-repo PATH] [--cache-dir DIR] [--only NAME ...]

1. ``llama``: examples/train_llama.py (a plain loop, random weights, max_position_embeddings=2048, 4 optimizer
   steps), transformers 4.36.0..4.38.2 by release, ``--max-increase 10%`` on step_peak_bytes.
2. ``trainer``: examples/train_trainer.py (``transformers.Trainer``, GA=2), the same range and rule.
3. ``torchrun``: examples/train_ddp.py under ``torchrun --nproc_per_node 2`` (DDP over gloo): the same range
   and rule, with each rank's own value (``step_peak_bytes.rank<N>``).
4. ``accelerate``: examples/train_accelerate.py (an accelerate loop, bf16, GA=1), accelerate's commits from
   0.27.2 to 0.28.0 through ``--repo`` (a local clone of accelerate), for where its peak fell (``--find-fix``:
   ``--bad`` the older side, still high; transformers pinned at 4.37.2, the user's own: as of each commit's
   date it would move to 4.38 within the range, whose own step is the one bisect 1 finds). Skipped without
   ``--accelerate-repo``.
5. ``trainer_ga`` and ``trainer_ga_loss``: examples/train_trainer_ga.py (``Trainer``, GA=4 over padded sequences of
   different lengths, SGD, ``max_grad_norm=0``), transformers 4.45.0..4.46.3 with ``--pre`` (4.46.0, where the
   loss under gradient accumulation was normalised anew, is yanked), ``--max-change 1%`` on ``grad_norm_first``
   and on ``loss_first``: the numbers the meter reads of each step, no numerics code in the script.

Each runs from a scratch directory holding the example (cwd = where bisector is started, as a user runs it),
with its own store; ``--cache-dir`` (default: a scratch one, removed after) keeps the environments between
runs. The scripts hold no memory code: the meter is injected. Needs the package index (and the clone).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRANSFORMERS = ["--package", "transformers", "--good", "4.36.0", "--bad", "4.38.2", "--mode", "releases",
                "--metric", "step_peak_bytes", "--max-increase", "10%"]
BISECTS = {
    "llama": ("train_llama.py", TRANSFORMERS, ["python", "train_llama.py"]),
    "trainer": ("train_trainer.py", TRANSFORMERS, ["python", "train_trainer.py"]),
    "torchrun": ("train_ddp.py", TRANSFORMERS, ["torchrun", "--nproc_per_node", "2", "train_ddp.py"]),
    "trainer_ga": ("train_trainer_ga.py", ["--package", "transformers", "--good", "4.45.0", "--bad", "4.46.3", "--pre",
                                           "--metric", "grad_norm_first", "--max-change", "1%"],
                   ["python", "train_trainer_ga.py"]),
    "trainer_ga_loss": ("train_trainer_ga.py", ["--package", "transformers", "--good", "4.45.0", "--bad", "4.46.3",
                                                "--pre", "--metric", "loss_first", "--max-change", "1%"],
                        ["python", "train_trainer_ga.py"]),
    "accelerate": ("train_accelerate.py", ["--package", "accelerate", "--bad", "0.27.2", "--good", "0.28.0",
                                           "--find-fix", "--mode", "commits", "--repo", "{repo}", "--with",
                                           "transformers==4.37.2", "--max-increase", "10%"],
                   ["python", "train_accelerate.py"]),
}


def human(value, metric: str = "step_peak_bytes") -> str:
    if not isinstance(value, (int, float)):
        return "-"
    return f"{value / 2**20:.2f} MiB" if metric.endswith("_bytes") else f"{value:.6g}"


def metric_of(flags: list[str]) -> str:
    return flags[flags.index("--metric") + 1] if "--metric" in flags else "step_peak_bytes"


def bisect(name: str, cache: Path, repo: str) -> dict:
    script, flags, command = BISECTS[name]
    with tempfile.TemporaryDirectory(prefix=f"bisector-{name}-") as tmp:
        shutil.copy(ROOT / "examples" / script, tmp)
        argv = [sys.executable, "-m", "bisector", "run", *[f.format(repo=repo) for f in flags], "--cache-dir",
                str(cache), "--store", str(Path(tmp) / "s.db"), "--json", "--", *command]
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=tmp, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.perf_counter() - start
    shown = " ".join(a for a in argv[3:argv.index("--cache-dir")] + argv[argv.index("--json") + 1:])
    if proc.returncode != 0:
        return {"name": name, "wall": wall, "error": f"exit {proc.returncode}: {proc.stderr.strip()[-1500:]}",
                "argv": shown}
    out = json.loads(proc.stdout)
    first, last = out.get("first_bad") or {}, out.get("last_good") or {}
    metric = metric_of(BISECTS[name][1])
    ranks = {k.split(".rank")[1]: (last.get("metrics", {}).get(k), v) for k, v in first.get("metrics", {}).items()
             if k.startswith(f"{metric}.rank")}
    return {"name": name, "wall": wall, "argv": shown, "headline": out.get("headline"), "probes": out["probes_run"],
            "first_bad": first.get("ref"), "last_good": last.get("ref"), "find_fix": out.get("find_fix"),
            "good": (last.get("metrics") or {}).get(metric), "metric": metric,
            "bad": (first.get("metrics") or {}).get(metric), "ranks": ranks}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accelerate-repo", help="a local clone of accelerate (the accelerate commit bisect)")
    ap.add_argument("--cache-dir", type=Path, help="environment cache kept between runs (default: a scratch one)")
    ap.add_argument("--only", nargs="+", choices=list(BISECTS), help="run only these")
    args = ap.parse_args()
    names = args.only or list(BISECTS)
    if not args.accelerate_repo and "accelerate" in names:
        names.remove("accelerate")
        print("accelerate: skipped (give --accelerate-repo, a local clone of accelerate)")
    scratch = None if args.cache_dir else tempfile.mkdtemp(prefix="bisector-cache-")
    cache = args.cache_dir or Path(scratch)
    try:
        for name in names:
            r = bisect(name, cache, args.accelerate_repo or "")
            print(f"\n{name}: {r['argv']}")
            if "error" in r:
                print(f"  FAILED after {r['wall']:.0f} s: {r['error']}")
                continue
            print(f"  {r['headline']}")
            before, after = ("last broken", "first fixed") if r["find_fix"] else ("last good", "first bad")
            metric = r["metric"]
            print(f"  {before} {r['last_good']}: {human(r['good'], metric)}   {after} {r['first_bad']}: "
                  f"{human(r['bad'], metric)}   ({r['probes']} probes, {r['wall']:.0f} s)")
            for rank, (good, bad) in sorted(r["ranks"].items()):
                print(f"  rank {rank}: {human(good, metric)} -> {human(bad, metric)}")
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
