"""Benchmark: candidate env creation with bisector.envs vs a hand-made venv + pip.

Measured side by side in one run, for accelerate==0.22.0:

* baseline: ``python -m venv v && v/bin/pip install accelerate==0.22.0 torch==2.13.0``
  (what a user does by hand; torch is pinned so pip takes the local 2.13.0 wheel its
  configuration points at rather than a CUDA build). Run twice; the second run has pip's
  cache warm; ratios use the faster of the two.
* ours cold: EnvManager with an empty uv cache and an empty env cache (downloads, overlay).
* ours warm: a new env (new fingerprint, same resolution) with uv's cache warm, checked as a
  bisect checks it (``defer_health``: from disk; the probe's own imports prove it afterwards).
* ours warm, import check: the same with the old standalone health check (a second interpreter
  importing the candidate and torch), for comparison.
* cached-ready: ``ensure`` of an env that already exists.

Disk per env: "extra" counts allocated blocks of inodes with st_nlink == 1 (held only by
that env) plus dirs, each inode once; files hard-linked from uv's cache count zero.
"apparent" is the plain sum of file sizes. Needs network access to the package index.

Run: ``python bench/envs.py``
"""
from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bisector.envs import EnvManager, EnvSpec, InstallTarget  # noqa: E402
from bisector.envs import disk_usage  # noqa: E402

PACKAGE, VERSION = "accelerate", "0.22.0"
UPLOADED = dt.datetime(2023, 8, 23, 6, 25, 15, tzinfo=dt.timezone.utc)
TORCH_PIN = "torch==2.13.0"


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def baseline(root: Path) -> float:
    """python -m venv + pip install, into a fresh venv."""
    venv = root / "venv"
    shutil.rmtree(venv, ignore_errors=True)

    def work():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                        f"{PACKAGE}=={VERSION}", TORCH_PIN], check=True)
    seconds, _ = timed(work)
    return seconds


def ours(manager: EnvManager, spec: EnvSpec, as_of: dt.datetime):
    target = InstallTarget(package=PACKAGE, version=VERSION, as_of=as_of)
    return timed(lambda: manager.ensure(spec, target))


def mb(n: int) -> str:
    return f"{n / 1e6:8.1f} MB"


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bisector-bench-", dir=os.environ.get("BENCH_DIR")))
    os.environ["UV_CACHE_DIR"] = str(root / "uv-cache")   # empty: the cold run downloads
    spec = EnvSpec(name="bench", base="current")
    manager = EnvManager(root / "cache", defer_health=True)
    importing = EnvManager(root / "cache-import")
    try:
        base1 = baseline(root)
        base2 = baseline(root)
        base_extra, base_apparent = disk_usage(root / "venv")
        cold, env_cold = ours(manager, spec, UPLOADED)
        warm, env_warm = ours(manager, spec, UPLOADED + dt.timedelta(seconds=1))
        imported, _ = ours(importing, spec, UPLOADED + dt.timedelta(seconds=2))
        ready, env_ready = ours(manager, spec, UPLOADED)
        assert env_ready.path == env_cold.path and env_warm.path != env_cold.path
        report(base1, base2, cold, warm, imported, ready, env_warm, base_extra, base_apparent)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report(base1, base2, cold, warm, imported, ready, env, base_extra, base_apparent) -> None:
    best = min(base1, base2)
    rows = [
        ("baseline venv+pip (1st run)", base1), ("baseline venv+pip (2nd run, pip cache warm)", base2),
        ("ours cold (empty uv cache, new overlay)", cold), ("ours warm (new env, uv cache warm)", warm),
        ("ours warm, standalone import health check", imported), ("ours cached-ready (existing env)", ready),
    ]
    print(f"{PACKAGE}=={VERSION}, python {sys.version.split()[0]}, ratios = best baseline / ours")
    print(f"{'':46} {'seconds':>9} {'ratio':>8}")
    for label, seconds in rows:
        ratio = f"{best / seconds:7.1f}x" if label.startswith("ours") else ""
        print(f"{label:46} {seconds:9.3f} {ratio:>8}")
    print(f"  (ours warm: checked from disk in {env.info.health_seconds:.3f}s, health '{env.info.health}'; the "
          "import is proved by the first probe run in it)")
    print(f"resolved set (warm env): {', '.join(env.info.resolved)}")
    print("disk per env (extra = blocks of inodes with st_nlink == 1, i.e. not hard-linked "
          "from uv's cache; apparent = sum of file sizes):")
    print(f"  ours     extra {mb(env.info.size_bytes)}   apparent {mb(env.info.apparent_bytes)}")
    print(f"  baseline extra {mb(base_extra)}   apparent {mb(base_apparent)}")


if __name__ == "__main__":
    main()
