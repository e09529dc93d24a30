"""Issues 45 and 47, run as a maintainer runs the file: a command run's repro, alone in an empty directory, writes the
files its command names beside itself (the sha256 it carries checked, a file already there kept) and runs the
command there under the embedded meter; a command whose words hold triple quotes and a newline still compiles and
runs; every kind of repro refuses an argument it does not take in one line (exit 2), never with a traceback.
(The same in fresh venvs made by the script's own install lines: tests/slow/test_repro_alone.py.)"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from bisector.core.points import Point
from bisector.core.result import BisectResult
from bisector.job.config import JobConfig
from bisector.repro.compose import repro_script
from tests.unit.test_repro_words import _scripts

# a training loop whose step holds SCALE MB (from its config file), with a docstring and a secret of its own
TRAIN = '''
"""A user's training script: its step holds conf["mb"] MB."""
import json
import sys

import torch

HF_TOKEN = "hf_abcdefghijklmnopqrstuvwx"
conf = json.load(open(sys.argv[sys.argv.index("--config") + 1]))
w = torch.nn.Parameter(torch.ones(1000))
opt = torch.optim.SGD([w], lr=0.1)
for step in range(3):
    big = torch.ones(conf["mb"] * 1_000_000, dtype=torch.uint8)
    loss = (w * 2).sum() + big[:1].float().sum() * 0
    loss.backward()
    opt.step()
    opt.zero_grad()
print("note:", sys.argv[-1])
'''
NOTE = 'a """quoted""" note\nwith a second line; """; raise SystemExit(7); """'
COMMAND = ["python", "train.py", "--config", "conf.json", "--note", NOTE]


def _command_result(threshold: float) -> BisectResult:
    env = {"python": "3.11.7", "torch": "2.13.0+cpu", "tinypkg": "x"}
    sides = [Point(ref=v, kind="release", value=x, env={**env, "tinypkg": v}, pins=[f"tinypkg=={v}"])
             for v, x in (("1.2.0", 4e6), ("1.3.0", 8e6))]
    return BisectResult(run_id="c1", package="tinypkg", mode="release", status="found", reason="found",
                        criterion=f"step_peak_bytes > {threshold}", metric="step_peak_bytes", threshold=threshold,
                        last_good=sides[0], first_bad=sides[1], command=["bisector", "run", "--", *COMMAND])


def _written(tmp_path: Path, threshold: float, name: str = "alone") -> Path:
    """The repro of a command run in ``tmp_path/work``, alone in ``tmp_path/<name>`` (nothing else there)."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text(textwrap.dedent(TRAIN))
    (work / "conf.json").write_text('{"mb": 2}\n')
    config = JobConfig.model_validate({"job": {"package": "tinypkg", "good": "1.0", "bad": "1.4"},
                                       "probe": {"command": COMMAND, "cwd": str(work)},
                                       "criterion": {"metric": "step_peak_bytes", "threshold": threshold}})
    alone = tmp_path / name
    alone.mkdir()
    script = alone / "repro.py"
    script.write_text(repro_script(_command_result(threshold), config, script.name).text)
    return script


def _run(script: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BISECTOR_RESULT")}
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=env)


def test_alone_in_an_empty_directory_it_writes_the_files_its_command_names_and_reproduces(tmp_path):
    script = _written(tmp_path, threshold=3e6)
    text = script.read_text()
    assert "import bisector" not in text and "from bisector" not in text
    tree = ast.parse(text)
    assert not [n for n in tree.body if isinstance(n, ast.Raise)]   # the note's `raise` is data
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ran = _run(script, cwd=elsewhere)   # from any directory: the command runs in the script's
    assert ran.returncode == 1, ran.stderr[-3000:]
    assert "note: " + NOTE in ran.stdout   # the word reached the program whole, and ran nothing
    verdict = ran.stdout.strip().splitlines()[-1]
    assert verdict.startswith("step_peak_bytes = ") and verdict.endswith(": BAD (BAD when > 2.86 MiB)"), ran.stdout
    assert sorted(p.name for p in script.parent.iterdir()) == ["conf.json", "repro.py", "train.py"]
    written = (script.parent / "train.py").read_text()
    assert 'HF_TOKEN = "***"' in written and written.replace('"***"', '"hf_abcdefghijklmnopqrstuvwx"') == \
        textwrap.dedent(TRAIN)   # the user's file, its secret masked
    assert not list(elsewhere.iterdir())
    good = _written(tmp_path, threshold=100e6, name="alone_good")
    ran = _run(good, cwd=good.parent)
    assert ran.returncode == 0 and ran.stdout.strip().endswith(": GOOD (BAD when > 95.37 MiB)"), ran.stderr[-3000:]


def test_a_file_already_beside_it_is_kept_and_a_changed_script_is_refused(tmp_path):
    script = _written(tmp_path, threshold=3e6)
    (script.parent / "conf.json").write_text('{"mb": 1}\n')   # the maintainer's own: kept, and said
    tampered = script.parent / "tampered.py"
    tampered.write_text(script.read_text().replace('{"mb": 2}', '{"mb": 9}'))
    refused = _run(tampered, cwd=script.parent)
    assert refused.returncode == 2 and refused.stderr == (
        "tampered.py: error: the carried 'conf.json' is not what its sha256 says: this script was changed\n")
    ran = _run(script, cwd=script.parent)
    assert "repro: conf.json here is not the one the bisect ran (sha256 " in ran.stderr
    assert (script.parent / "conf.json").read_text() == '{"mb": 1}\n'
    assert ran.returncode == 0 and ran.stdout.strip().endswith(": GOOD (BAD when > 2.86 MiB)"), ran.stderr[-2000:]
    (script.parent / "conf.json").write_text("{")   # a command that fails is judged as the bisect judged it: skipped
    failed = _run(script, cwd=script.parent)
    assert failed.returncode == 125 and failed.stderr.endswith(
        "the command exited 1: nothing measured; not judged (exit 125), as the bisect skipped a failure\n")


def test_every_kind_refuses_an_argument_it_does_not_take_in_one_line(tmp_path):
    for kind, text in _scripts(["python", "x.py"], tmp_path).items():
        script = tmp_path / f"{kind.value}.py"
        script.write_text(text)
        refused = _run(script, "--bogus", "x", cwd=tmp_path)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, (kind, refused.stderr)
        assert refused.stderr.startswith(f"{script.name}: error: unknown argument '--bogus'; usage: python "
                                         f"{script.name}"), refused.stderr
        helped = _run(script, "--help", cwd=tmp_path)
        assert helped.returncode == 0 and helped.stdout.startswith(f"usage: python {script.name}"), helped.stderr
    bare = _run(tmp_path / "command.py", "--", cwd=tmp_path)
    assert (bare.returncode, bare.stderr) == (2, "command.py: error: no command after --\n")


def test_a_secret_of_the_command_is_asked_for_never_written(tmp_path):
    """The store keeps a command's secrets masked, so the repro written from it holds ``***``: run as it is, it
    says which variable gives each back (exit 2); with them, the program gets the words as typed."""
    from bisector.redact import mask_words

    token = "hf_" + "Zy9" * 10
    words = mask_words([*COMMAND[:4], "--hub_token", token, "--note", "n"])
    assert token not in words
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(textwrap.dedent(TRAIN).replace('print("note:", sys.argv[-1])',
                                                                   'print("token:", sys.argv[4])'))
    (work / "conf.json").write_text('{"mb": 2}\n')
    config = JobConfig.model_validate({"job": {"package": "tinypkg", "good": "1.0", "bad": "1.4"},
                                       "probe": {"command": words, "cwd": str(work)},
                                       "criterion": {"metric": "step_peak_bytes", "threshold": 3e6}})
    script = tmp_path / "repro.py"
    text = repro_script(_command_result(3e6), config, script.name).text
    assert token not in text
    script.write_text(text)
    asked = _run(script, cwd=tmp_path)
    assert asked.returncode == 2 and asked.stderr.strip() == (
        "repro: the command held 1 secret(s), written masked: give each word as it was typed in BISECTOR_SECRET_1 "
        "for ***")
    given = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                           env={**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BISECTOR_RESULT")},
                                "BISECTOR_SECRET_1": token})
    assert given.returncode == 1 and f"token: {token}" in given.stdout, given.stderr[-2000:]
    assert given.stdout.count(token) == 1   # the program's own print; the script says the command masked
