"""Issue 45, "the repro stands alone", checked as a maintainer would: a command run (``bisector run ... -- python
train.py --config conf.json --data data``) and its ``report --repro``; then only repro.py, copied into an empty
directory, its own ``# $`` install lines run there one by one in bash, as printed, and the script run in each
fresh venv. It writes train.py and conf.json beside itself (carried, each with its sha256), says that data/ is not
carried (without it the command fails: not judged, exit 125, as the bisect skipped a failure) and, once
data/ is put there as its header says, gives GOOD (exit 0) in the good venv and BAD (exit 1) in
the bad one. The stand-ins are the ones bisector's own verification uses, for the same reasons: ``python3`` is
this interpreter (the header names its version) and its torch is made visible in each venv (a .pth) instead of a
download of gigabytes; the index is the loopback one the bisect installed from."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bisector.bisection.wiring import job_spec
from bisector.envs import CacheLayout, ensure_overlay, install_pth, resolve_base, site_packages
from bisector.job.config import JobConfig
from bisector.store.storage import Store
from tests.slow.test_command_run_real import ROOT, torch_index  # noqa: F401 (the fixture: tinypkg 1.0.0 .. 1.4.0)

pytestmark = pytest.mark.slow
MB = 1_000_000
TRAIN = """
import argparse
import json
import os

import tinypkg
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--config")
parser.add_argument("--data")
args = parser.parse_args()
steps = json.load(open(args.config))["steps"]
with open(os.path.join(args.data, "seed.bin"), "rb") as fh:
    torch.manual_seed(fh.read()[0])
w = torch.nn.Parameter(torch.ones(1000))
opt = torch.optim.SGD([w], lr=0.1)
for step in range(steps):
    big = torch.ones(2_000_000, dtype=torch.uint8)
    loss = tinypkg.forward(w) + big[:1].float().sum() * 0
    loss.backward()
    opt.step()
    opt.zero_grad()
print("done")
"""


def _bisector(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}   # this checkout's bisector, wherever the test runs from
    return subprocess.run([sys.executable, "-m", "bisector", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env=env)


def _maintainer_env(shims: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "BISECTOR_RESULT", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")}
    return {**env, "PATH": f"{shims}{os.pathsep}{env.get('PATH', '')}", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PYTHONNOUSERSITE": "1"}


def test_the_repro_alone_in_an_empty_directory_reproduces_in_venvs_from_its_own_lines(torch_index, tmp_path,
                                                                                       env_cache, plain_spec):
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "train.py").write_text(textwrap.dedent(TRAIN))
    (work / "conf.json").write_text('{"steps": 3}\n')
    (work / "data" / "seed.bin").write_bytes(b"\x07\x00\xff")
    store = ["--store", str(tmp_path / "s.db"), "--cache-dir", str(env_cache)]
    run = _bisector("run", "--package", "tinypkg", "--mode", "releases", "--good", "1.0.0", "--bad", "1.4.0",
                    "--index-url", torch_index, "--env", str(plain_spec), "--max-increase", "50%", "--json", *store,
                    "--", "python", "train.py", "--config", "conf.json", "--data", "data", cwd=work)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout)["first_bad"]["ref"] == "1.3.0"
    made = _bisector("report", "--repro", "repro.py", "--format", "json", *store, cwd=work)
    assert made.returncode == 0, made.stderr[-3000:]
    recorded = json.loads(made.stdout)["repro"]
    assert recorded["verified"] is True and recorded["left_out"] == ["data/ (a directory)"], recorded

    # the maintainer: the file alone, in an empty directory
    maint = tmp_path / "maintainer"
    maint.mkdir()
    shutil.copy(work / "repro.py", maint / "repro.py")
    text = (maint / "repro.py").read_text()
    assert "Not carried (put each there by hand, at the path the command names, before running it): data/ (a" in text
    lines = subprocess.run(["sed", "-n", "s/^# [$] //p", "repro.py"], cwd=maint, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert [line.split()[:3] for line in lines if "venv" in line] == [["python3", "-m", "venv"]] * 2
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python3").symlink_to(sys.executable)
    env = _maintainer_env(shims)
    spec = job_spec(JobConfig.model_validate(Store(tmp_path / "s.db", read_only=True).list_runs()[-1].config))
    layout = CacheLayout(env_cache)
    torch_overlay = ensure_overlay(resolve_base(spec, layout), layout)
    for line in lines:
        done = subprocess.run(["bash", "-c", line], cwd=maint, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (line, done.stderr[-2000:])
        venv = re.fullmatch(r"python3 -m venv (\w+)", line)
        if venv and torch_overlay is not None:   # the stand-in for torch's download
            install_pth(site_packages(maint / venv[1]), torch_overlay)
    for venv in ("good", "bad"):
        alone = subprocess.run([str(maint / venv / "bin" / "python"), "-c", "import bisector"], env=env, cwd=maint,
                               capture_output=True, text=True)
        assert alone.returncode != 0 and "No module named 'bisector'" in alone.stderr   # no bisector there

    def repro(venv: str) -> subprocess.CompletedProcess:
        return subprocess.run([f"{venv}/bin/python", "repro.py"], cwd=maint, env=env, capture_output=True, text=True,
                              timeout=300)

    missing = repro("good")   # data/ is not there yet: the command fails, and the script says what it lacks
    assert missing.returncode == 125 and "No such file or directory: 'data/seed.bin'" in missing.stderr
    assert ("the command exited 1: nothing measured; not judged (exit 125), as the bisect skipped a failure\n"
            "(it may need what this script does not carry: data/ (a directory))\n") in missing.stderr
    assert (maint / "train.py").read_text() == (work / "train.py").read_text()
    assert (maint / "conf.json").read_text() == (work / "conf.json").read_text()
    shutil.copytree(work / "data", maint / "data")   # as the header says
    good, bad = repro("good"), repro("bad")
    assert good.returncode == 0 and ": GOOD (BAD when > " in good.stdout, good.stdout + good.stderr[-3000:]
    assert bad.returncode == 1 and ": BAD (BAD when > " in bad.stdout, bad.stdout + bad.stderr[-3000:]
    assert "done" in good.stdout and "done" in bad.stdout
