"""End-to-end benchmark: `bisector run --mode commits` vs a hand-rolled `git bisect run` baseline.

A generated 200-commit repository of a pure-Python package that depends on torch; the probe imports
it, runs a small torch step and reports the bytes it allocates. The memory step is planted at one
commit. The baseline is what a user writes by hand: `git bisect run` around a fresh `python -m venv`,
`pip install . torch==<this torch>` and the probe. Both must name the same commit.

Prints one table: wall seconds, steps, and the ratio baseline / bisector for a cold run (empty caches)
and a warm run (empty store, warm environment cache), plus what prefetching the next midpoints'
environments saves on a cold run (--prefetch vs --no-prefetch, each with its own empty cache). Usage: python bench/e2e.py [--commits 200]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = textwrap.dedent('''
    import json, os, sys
    import torch, torchpkg
    nbytes = torchpkg.step()
    if "--exit-code" in sys.argv:
        sys.exit(1 if nbytes > 300 * 1024 else 0)
    with open(os.environ["BISECTOR_RESULT"], "w") as fh:
        json.dump({"metrics": {"step_bytes": float(nbytes)}}, fh)
''')
MODULE = textwrap.dedent('''
    import torch
    __version__ = "{version}"
    KIB = {kib}

    def step():
        t = torch.zeros(KIB * 256, dtype=torch.float32)
        return t.numel() * t.element_size()
''')
PYPROJECT = textwrap.dedent('''
    [build-system]
    requires = ["setuptools>=61"]
    build-backend = "setuptools.build_meta"

    [project]
    name = "{name}"
    version = "{version}"
    dependencies = ["torch>=2.0"]

    [tool.setuptools]
    packages = ["{name}"]
''')


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def make_repo(root: Path, commits: int, bad_at: int, name: str = "torchpkg", module: str = MODULE,
              pyproject: str = PYPROJECT) -> tuple[Path, list[str]]:
    """A git repository of package ``name`` (``module`` its __init__, ``pyproject`` its build, both
    formatted with the commit's version and KiB: 100, then 400 from ``bad_at`` on), oldest SHA first."""
    repo = root / name
    (repo / name).mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for i in range(commits):
        version = f"0.{i}.0"
        (repo / "pyproject.toml").write_text(pyproject.format(version=version, name=name))
        (repo / name / "__init__.py").write_text(module.format(version=version, kib=400 if i >= bad_at else 100))
        (repo / "NEWS").write_text(f"{i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"change {i}", "--date", f"2025-01-01T00:{i // 60:02d}:{i % 60:02d}")
        shas.append(git(repo, "rev-parse", "HEAD").strip())
    return repo, shas


def baseline(repo: Path, work: Path, good: str, bad: str) -> tuple[float, str, int]:
    """git bisect run with a fresh venv + pip install + probe per step."""
    import torch
    probe = work / "probe.py"
    probe.write_text(PROBE)
    step = work / "step.sh"
    step.write_text(textwrap.dedent(f'''\
        #!/bin/sh
        rm -rf {work}/venv && {sys.executable} -m venv {work}/venv || exit 125
        {work}/venv/bin/pip install -q . torch=={torch.__version__.split("+")[0]} >/dev/null 2>&1 || exit 125
        echo step >> {work}/steps
        cd / && {work}/venv/bin/python {probe} --exit-code
        '''))
    step.chmod(0o755)
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    start = time.monotonic()
    git(clone, "bisect", "start", bad, good)
    out = git(clone, "bisect", "run", str(step))
    seconds = time.monotonic() - start
    first_bad = next(line.split()[0] for line in out.splitlines() if "is the first bad commit" in line)
    return seconds, first_bad, len((work / "steps").read_text().split())


def ours(repo: Path, work: Path, cache: Path, good: str, bad: str, *extra: str) -> tuple[float, str, int]:
    probe = work / "probe.py"
    probe.write_text(PROBE)
    spec = work / "spec.toml"
    spec.write_text('name = "bench"\nbase = "current"\n')
    argv = [sys.executable, "-m", "bisector", "run", "--package", "torchpkg", "--mode", "commits", "--repo",
            str(repo), "--good", good, "--bad", bad, "--probe", str(probe), "--metric", "step_bytes",
            "--threshold", str(300 * 1024), "--env", str(spec), "--store", str(work / "store.db"),
            "--cache-dir", str(cache), "--json", *extra]
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"bisector failed: {done.stderr[-2000:]}")
    out = json.loads(done.stdout)
    return seconds, out["first_bad"]["sha"], out["probes_run"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--bad-at", type=int, default=137)
    parser.add_argument("--skip-baseline", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bisector-bench-e2e-"))
    try:
        repo, shas = make_repo(tmp, args.commits, args.bad_at)
        cache = tmp / "cache"
        rows = []
        if not args.skip_baseline:
            (tmp / "base").mkdir()
            rows.append(("baseline: git bisect run + venv + pip", *baseline(repo, tmp / "base", shas[0], shas[-1])))
        (tmp / "noprefetch").mkdir()
        rows.append(("bisector cold, --no-prefetch", *ours(repo, tmp / "noprefetch", tmp / "cache-np", shas[0],
                                                            shas[-1], "--no-prefetch")))
        for name in ("cold", "warm"):
            (tmp / name).mkdir()
            rows.append((f"bisector {name}", *ours(repo, tmp / name, cache, shas[0], shas[-1], "--prefetch")))
        print(f"{'run':<40} {'seconds':>9} {'steps':>6}  first bad")
        for name, seconds, sha, steps in rows:
            print(f"{name:<40} {seconds:9.1f} {steps:>6}  {sha[:12]}")
        if not args.skip_baseline:
            base = rows[0][1]
            for name, seconds, _, _ in rows[1:]:
                print(f"ratio baseline / {name:<22} {base / seconds:9.1f}x")
        cold_np = next(r[1] for r in rows if r[0].endswith("--no-prefetch"))
        cold = next(r[1] for r in rows if r[0] == "bisector cold")
        print(f"prefetch saved {cold_np - cold:.1f} s on the cold bisect ({(cold_np - cold) / cold_np:.0%})")
        same = len({r[2] for r in rows}) == 1 and rows[0][2] == shas[args.bad_at]
        print(f"all name the planted commit {shas[args.bad_at][:12]}: {'yes' if same else 'NO'}")
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
