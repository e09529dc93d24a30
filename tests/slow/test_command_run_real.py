"""``bisector run ... -- python train.py`` end to end: a real local index, real environments (the running
interpreter's torch as their base), the user's unmodified script measured by the injected meter, the
report, and the repro written and verified in both environments."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.support.pkgindex import LocalIndex, build_wheel

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
MB = 1_000_000

# from 1.3.0 on, tinypkg's step keeps a 6 MB scratch tensor alive through backward: a training-step regression
SOURCE = """
import torch

EXTRA = {extra}


def forward(x):
    scratch = torch.ones(EXTRA or 1, dtype=torch.uint8)
    return (x * 2).sum() + scratch[:1].float().sum() * 0
"""

TRAIN = """
import torch
import tinypkg

w = torch.nn.Parameter(torch.ones(1000))
opt = torch.optim.SGD([w], lr=0.1)
for step in range(3):
    big = torch.ones(2_000_000, dtype=torch.uint8)   # what the user's own step holds
    loss = tinypkg.forward(w) + big[:1].float().sum() * 0
    loss.backward()
    opt.step()
    opt.zero_grad()
print("done")
"""


@pytest.fixture(scope="module")
def torch_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmdindex")
    idx = LocalIndex(root / "idx")
    for i, v in enumerate(["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"]):
        src = SOURCE.format(extra=6 * MB if v >= "1.3.0" else 0)
        idx.add(build_wheel(root / "w", "tinypkg", v, module_source=src), T0 + dt.timedelta(days=i))
    with idx.serve() as url:
        yield url


def test_your_script_unchanged_names_the_release_and_its_repro_reproduces_it(torch_index, tmp_path, env_cache,
                                                                              plain_spec):
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    store = tmp_path / "s.db"
    common = ["--store", str(store)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-m", "bisector", "run", "--package", "tinypkg", "--mode", "releases",
                          "--good", "1.0.0", "--bad", "1.4.0", "--index-url", torch_index, "--env", str(plain_spec),
                          "--cache-dir", str(env_cache), "--max-increase", "50%", "--json", *common,
                          "--", "python", "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                         env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["first_bad"]["ref"] == "1.3.0" and out["last_good"]["ref"] == "1.2.0"
    good, bad = out["last_good"]["metrics"], out["first_bad"]["metrics"]
    # the script's own: at `big = ...` the next 2 MB exists before the last one is let go, so 4 MB; with
    # tinypkg 1.3.0 its 6 MB scratch beside the 2 MB in the forward: 8 MB (and the 4 kB parameter)
    assert 4 * MB <= good["step_peak_bytes"] < 4 * MB + 16384
    assert 8 * MB <= bad["step_peak_bytes"] < 8 * MB + 16384
    assert good["optimizer_steps"] == 3 and "command: python train.py" in json.dumps(out["probe"])
    repro = tmp_path / "repro.py"
    done = subprocess.run([sys.executable, "-m", "bisector", "report", out["run_id"], "--repro", str(repro),
                           "--format", "json", *common, "--cache-dir", str(env_cache)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    checked = json.loads(done.stdout)["repro"]
    assert checked["verified"] is True, checked
    text = repro.read_text()
    assert "COMMAND = ['python', 'train.py']" in text and "import bisector" not in text
    # run as a maintainer would, without bisector: here with this interpreter, whose tinypkg is none
    alone = subprocess.run([sys.executable, str(repro), "--", sys.executable, "-c", "import torch; print(1)"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert alone.returncode == 0 and "measured" in alone.stdout and "optimizer_steps" in alone.stdout, alone.stderr
