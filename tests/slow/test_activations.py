"""A planted activation regression in a generated package: an extra fp32 copy of every layer's
activation, kept until the loss. It is invisible in the step's peak at these sizes (the backward
peaks higher), visible in the forward phase's peaks and in its bytes per token, and a bisect on that
metric names the planted commit. Real git repository, real environments, the real ga_memory probe
through --model-factory (accelerate comes from the package index: BISECTOR_OFFLINE=1 skips this)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import accelerate
import pytest

from tests.support.gitfixture import git
from tests.support.gitrepo import package_files
from tests.support.tinylm import tiny_lm_source

pytestmark = pytest.mark.skipif(os.environ.get("BISECTOR_OFFLINE") == "1", reason="needs the real package index")

PLANTED = 6
ARGS = ["--loop=accelerate", "--model-factory=actpkg:build", "--precisions=fp32", "--ga=1", "--sizes=32,64", "--seq-lens=8,64",
        "--no-gradient-checkpointing"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("actrepo") / "actpkg"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    shas = []
    for i in range(10):
        for rel, text in package_files("actpkg", f"0.1.{i}", module_source=tiny_lm_source(keep_activations=i >= PLANTED)).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        date = f"2026-11-{1 + i:02d}T10:00:00+00:00"   # recent: the pinned accelerate's needs resolve as of it
        git(root, "add", "-A", date=date)
        git(root, "commit", "-q", "-m", f"Change {i} (#{200 + i})", date=date)
        shas.append(git(root, "rev-parse", "HEAD").strip())
    return root, shas


def test_bisect_on_forward_bytes_per_token_finds_the_planted_commit(repo, tmp_path, env_cache):
    root, shas = repo
    spec = tmp_path / "act.toml"   # accelerate for the loop, pinned to the version the tests run with
    spec.write_text(f'name = "act"\nbase = "current"\n[companions]\naccelerate = "=={accelerate.__version__}"\n')
    argv = [sys.executable, "-m", "bisector", "run", "--package", "actpkg", "--mode", "commits", "--repo", str(root),
            "--good", shas[0], "--bad", shas[-1], "--probe", "ga_memory", *(f"--probe-arg={a}" for a in ARGS),
            "--metric", "bytes_per_token.fp32.ga1.forward", "--max-increase", "5%", "--env", str(spec),
            "--store", str(tmp_path / "s.db"), "--cache-dir", str(env_cache), "--json", "--full"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["status"] == "found" and out["first_bad"]["sha"] == shas[PLANTED], out["reason"]
    good, bad = out["last_good"]["metrics"], out["first_bad"]["metrics"]
    for name in [k for k in good if k.startswith("peak_bytes.")]:
        assert bad[name] == good[name], name   # invisible in the step's peak
    assert bad["phase_peak_bytes.fp32.ga1.h64.t64.forward"] > good["phase_peak_bytes.fp32.ga1.h64.t64.forward"]
    assert bad["bytes_per_token.fp32.ga1.forward"] > good["bytes_per_token.fp32.ga1.forward"] * 1.05
    assert "fp32 GA=1 forward bytes per token rose from" in out["headline"]
