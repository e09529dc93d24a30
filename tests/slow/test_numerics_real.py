"""Numbers as a bisectable metric of an unchanged program, for real: a git repository of a tiny package whose
planted commit scales one computation by 1.001, each commit built into its own environment, the user's training
script after ``--`` read by the command meter (its loss and gradient norm per optimizer step, no numerics code in
it), judged by the two-sided rule; and a program that does not repeat refused before anything is bisected."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.gitfixture import git, write_package

ROOT = Path(__file__).resolve().parents[2]
PLANTED = 5

SOURCE = '''"""tinynum: one computation of a model's forward."""
import torch

SCALE = {scale}


def forward(x, w):
    return torch.tanh(x @ w) * SCALE
'''

TRAIN = """
import os
import torch
import tinynum

torch.manual_seed({seed})
w = torch.nn.Parameter(torch.randn(16, 4) * 0.5)
opt = torch.optim.SGD([w], lr=0.1)
for step in range(3):
    for micro in range(2):
        x = torch.randn(8, 16)
        loss = (tinynum.forward(x, w) - 0.5).square().mean() / 2
        loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {{step}} loss {{loss.item():.6f}}")
"""


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """8 commits of tinynum; from commit 5 on, forward's output is 1.001 times what it was."""
    repo = tmp_path_factory.mktemp("numbers-repo") / "tinynum"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for i in range(8):
        write_package(repo, "tinynum", f"0.1.{i}", 0, SOURCE.format(scale=1.001 if i >= PLANTED else 1.0))
        (repo / "CHANGES.txt").write_text(f"change {i}\n")
        date = f"2024-02-{1 + i:02d}T10:00:00+00:00"
        git(repo, "add", "-A", date=date)
        git(repo, "commit", "-q", "-m", f"Change number {i} (#{200 + i})", date=date)
        shas.append(git(repo, "rev-parse", "HEAD").strip())
    return repo, shas


def bisect(planted, tmp_path, env_cache, plain_spec, seed: str, *rule: str):
    repo, shas = planted
    (tmp_path / "train.py").write_text(TRAIN.format(seed=seed))
    return subprocess.run(
        [sys.executable, "-m", "bisector", "run", "--package", "tinynum", "--mode", "commits", "--repo", str(repo),
         "--good", shas[0], "--bad", shas[-1], "--env", str(plain_spec), "--cache-dir", str(env_cache),
         "--store", str(tmp_path / "s.db"), "--json", *rule, "--", "python", "train.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=1200, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_change_of_one_in_a_thousand_is_found_within_its_tolerance_and_not_beyond(planted, tmp_path, env_cache,
                                                                                    plain_spec):
    _, shas = planted
    found = bisect(planted, tmp_path, env_cache, plain_spec, "0", "--metric", "loss_first", "--max-change", "0.05%")
    assert found.returncode == 0, found.stderr[-3000:]
    out = json.loads(found.stdout)
    assert out["status"] == "found" and out["first_bad"]["sha"] == shas[PLANTED]
    assert out["last_good"]["sha"] == shas[PLANTED - 1]
    good, bad = out["last_good"]["metrics"], out["first_bad"]["metrics"]
    assert 0.0005 < abs(bad["loss_first"] / good["loss_first"] - 1) < 0.01   # the planted 1.001, through the loss
    report = json.loads((tmp_path / "reports" / f"{out['run_id']}.json").read_text())
    story = report["explanation"]
    assert story[0] == "Each step's numbers, last good → first bad:" and story[1].startswith("step 0: loss ")
    assert any(line.startswith("They part at step 0 (the first optimizer step): loss ") for line in story)
    assert any(line.startswith("The gradients changed too (grad_norm ") for line in story)
    wide = bisect(planted, tmp_path, env_cache, plain_spec, "0", "--metric", "loss_first", "--max-change", "1%")
    assert wide.returncode == 0, wide.stderr[-3000:]   # within 1% everywhere: no change, and the answer says so
    assert json.loads(wide.stdout)["reason"] == f"the bad endpoint {shas[-1][:10]} measured good"


def test_a_program_that_does_not_repeat_is_refused_in_one_line_offering_stats(planted, tmp_path, env_cache,
                                                                            plain_spec):
    """Unseeded: the good end's two runs differ, and noise is never bisected as if it were a change."""
    done = bisect(planted, tmp_path, env_cache, plain_spec, "int.from_bytes(os.urandom(4), 'little')",
                  "--metric", "grad_norm_first", "--max-change", "0.05%")
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "does not repeat: grad_norm_first" in last and "--compare stats judges by samples" in last
    assert "the program is not deterministic" in last
