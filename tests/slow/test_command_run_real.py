"""``bisector run ... -- python train.py`` end to end: a real local index, real environments (the running
interpreter's torch as their base), the user's unmodified script measured by the injected meter, the
report, and the repro written and verified in both environments."""
from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bisector.store.storage import Store
from tests.support.pkgindex import LocalIndex, build_wheel
from tests.support.cli import run_bisector as _bisector

ROOT = Path(__file__).resolve().parents[2]
T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
MB = 1_000_000

# from 1.3.0 on, tinypkg's step keeps a 6 MB scratch tensor alive through backward: a training-step regression
SOURCE = """
import torch

EXTRA = {extra}


def forward(x):
    scratch = torch.ones(EXTRA or 1, dtype=torch.uint8)
    return (x * 2).sum() + scratch[:1].float().sum() * 0


def main():   # the console script tinytrain: the same loop as train.py, installed only in the environment
    w = torch.nn.Parameter(torch.ones(1000))
    opt = torch.optim.SGD([w], lr=0.1)
    for step in range(3):
        big = torch.ones(2_000_000, dtype=torch.uint8)
        loss = forward(w) + big[:1].float().sum() * 0
        loss.backward()
        opt.step()
        opt.zero_grad()
    print("done")
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


# tinyhelper 2.0 holds a 3 MB scratch through the step that 1.0 does not: the difference `diff` names
HELPER = "import torch\n\ndef scratch():\n    return torch.ones({extra} or 1, dtype=torch.uint8)\n"
TRAIN_DIFF = TRAIN.replace("    loss = tinypkg.forward(w)", "    held = tinyhelper.scratch()\n    loss = tinypkg.forward(w)"
                           ).replace("import tinypkg", "import tinypkg\nimport tinyhelper")
INFER = "import torch\nimport tinypkg\nx = torch.ones(3_000_000)\nprint(float(tinypkg.forward(x)))\n"


@pytest.fixture(scope="module")
def torch_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmdindex")
    idx = LocalIndex(root / "idx")
    for i, v in enumerate(["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"]):
        src = SOURCE.format(extra=6 * MB if v >= "1.3.0" else 0)
        idx.add(build_wheel(root / "w", "tinypkg", v, module_source=src, console_scripts={"tinytrain": "tinypkg:main"}),
                T0 + dt.timedelta(days=i))
    for i, v in enumerate(["1.0", "2.0"]):
        idx.add(build_wheel(root / "w", "tinyhelper", v, module_source=HELPER.format(extra=3 * MB if v == "2.0" else 0)),
                T0 + dt.timedelta(days=i))
    with idx.serve() as url:
        yield url


def test_your_script_unchanged_names_the_release_and_its_repro_reproduces_it(torch_index, tmp_path, env_cache,
                                                                              plain_spec):
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    store = tmp_path / "s.db"
    common = ["--store", str(store)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}   # this checkout's bisector, wherever the test runs from
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
    assert good["optimizer_steps"] == 3 and "your program: python train.py" in json.dumps(out["probe"])
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
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    alone = subprocess.run([sys.executable, str(repro), "--", sys.executable, "-c", "import torch; print(1)"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert alone.returncode == 0 and "measured" in alone.stdout and "optimizer_steps" in alone.stdout, alone.stderr


def test_a_console_script_only_the_candidate_installs_is_measured_and_a_missing_one_says_so(
        torch_index, tmp_path, env_cache, plain_spec):
    """`-- tinytrain`: a program on no PATH here, that tinypkg installs into each environment's bin; a program no
    environment installs is an environment failure at each endpoint, said in one line (exit 3)."""
    common = ["run", "--package", "tinypkg", "--mode", "releases", "--good", "1.0.0", "--bad", "1.4.0", "--index-url",
              torch_index, "--env", str(plain_spec), "--cache-dir", str(env_cache), "--store", str(tmp_path / "s.db"),
              "--max-increase", "50%", "--json"]
    run = _bisector(*common, "--", "tinytrain", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["first_bad"]["ref"] == "1.3.0" and 8 * MB <= out["first_bad"]["metrics"]["step_peak_bytes"] < 8 * MB + 16384
    missing = _bisector(*common, "--", "no-such-cli-33", cwd=tmp_path)
    assert missing.returncode == 3 and missing.stderr.strip().splitlines()[-1] == (
        "bisector: error: cannot measure either endpoint: the command's program 'no-such-cli-33' is "
        "neither in this environment (its bin, its console scripts) nor on PATH: this candidate does not install it")
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    skipped = _bisector(*common, "--measure-skip", "3", "--", "python", "train.py", cwd=tmp_path)
    assert skipped.returncode == 2 and skipped.stderr.strip().splitlines()[-1] == (
        "bisector: error: --measure-skip 3 leaves none of the 3 optimizer steps the command took (at 1.0.0) to "
        "measure: give --measure-skip below 3")


def test_probe_diff_and_matrix_measure_the_command(torch_index, tmp_path, env_cache, plain_spec):
    for name, text in (("train.py", TRAIN), ("train_diff.py", TRAIN_DIFF), ("infer.py", INFER)):
        (tmp_path / name).write_text(textwrap.dedent(text))
    where = ["--index-url", torch_index, "--env", str(plain_spec), "--cache-dir", str(env_cache), "--store",
             str(tmp_path / "s.db")]
    probe = _bisector("probe", "--with", "tinypkg==1.3.0", *where, "--", "python", "train.py", cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr[-3000:]
    lines = probe.stdout.splitlines()
    assert lines[0].startswith("tinypkg==1.3.0: ok") and lines[1] == "  probe your program: python train.py, meter cpu-dispatch"
    assert lines[2].split()[0] == "step_peak_bytes" and lines[2].split()[2] == "MiB" and "optimizer_steps" in probe.stdout
    # --measure-skip beyond the steps the command took: bad input, one line
    skip = _bisector("probe", "--with", "tinypkg==1.3.0", *where, "--measure-skip", "10", "--", "python", "train.py",
                     cwd=tmp_path)
    assert skip.returncode == 2 and skip.stdout == "" and skip.stderr.strip().splitlines()[-1] == (
        "bisector: error: --measure-skip 10 leaves none of the 3 optimizer steps the command took (at 1.3.0) to "
        "measure: give --measure-skip below 3")
    # no optimizer step: the whole run's metrics, and the default metric's absence said with its reason
    infer = _bisector("probe", "--with", "tinypkg==1.3.0", *where, "--", "python", "infer.py", cwd=tmp_path)
    assert infer.returncode == 0, infer.stderr[-3000:]
    assert "  step_peak_bytes: not measured: the command stepped no optimizer (no optimizer.step() seen): whole-run " \
           "metrics only (--metric peak_bytes" in infer.stdout and "peak_bytes" in infer.stdout
    # diff: two setups at tinypkg 1.2.0, tinyhelper 1.0 against 2.0: the difference that matters is named
    diff = _bisector("diff", "--with", "tinypkg==1.2.0", "--a-with", "tinyhelper==1.0", "--b-with", "tinyhelper==2.0",
                     *where, "--json", "--", "python", "train_diff.py", cwd=tmp_path)
    assert diff.returncode == 0, diff.stderr[-3000:]
    said = json.loads(diff.stdout)
    assert said["headline"].startswith("The difference that matters at tinypkg 1.2.0: tinyhelper (A: 1.0, B: 2.0)")
    # the bisect it offers, run as printed (with this test's store and cache): the same program, measured
    follow = shlex.split(said["follow_command"])
    assert follow[:2] == ["bisector", "run"] and follow[-3:] == ["--", "python", "train_diff.py"], follow
    cut = follow.index("--")
    bisect = _bisector(*follow[1:cut], "--cache-dir", str(env_cache), "--store", str(tmp_path / "s.db"), "--json",
                       *follow[cut:], cwd=tmp_path)
    assert bisect.returncode == 0, bisect.stderr[-3000:]
    found = json.loads(bisect.stdout)
    assert (found["package"], found["first_bad"]["ref"], found["last_good"]["ref"]) == ("tinyhelper", "2.0", "1.0")
    # matrix: the command as the grid's probe, given after -- (and --measure-skip with a job file's command)
    config = tmp_path / "m.toml"
    config.write_text(f'[matrix]\nenv = "{plain_spec}"\nindex_url = "{torch_index}"\n[matrix.grid]\n'
                      'tinypkg = ["1.2.0", "1.3.0"]\n[criterion]\nmax_increase = "50%"\n')
    grid = _bisector("matrix", "--config", str(config), "--out", str(tmp_path / "out"), "--cache-dir", str(env_cache),
                     "--store", str(tmp_path / "s.db"), "--json", "--", "python", "train.py", cwd=tmp_path)
    assert grid.returncode == 1, grid.stderr[-3000:] + grid.stdout[-6000:]   # a confirmed step along the versions
    cells = {c["versions"]["tinypkg"]: c["metrics"] for c in json.loads(grid.stdout)["cells"]}
    assert 4 * MB <= cells["1.2.0"]["step_peak_bytes"] < 4 * MB + 16384
    assert 8 * MB <= cells["1.3.0"]["step_peak_bytes"] < 8 * MB + 16384
    config.write_text(config.read_text() + '[probe]\ncommand = ["python", "train.py"]\n')
    again = _bisector("matrix", "--config", str(config), "--out", str(tmp_path / "out2"), "--cache-dir",
                      str(env_cache), "--store", str(tmp_path / "s2.db"), "--json", "--measure-skip", "2", cwd=tmp_path)
    assert again.returncode == 1, again.stderr[-3000:]
    store = Store(tmp_path / "s2.db")
    keys = [k for c in json.loads(again.stdout)["cells"] for k in c["measurements"]]
    assert keys and all(store.get_measurement(k).result.fields()["measure_skip"] == 2 for k in keys)
    store.close()
