"""The pure parts of ``bisector diff``: lock files, the package under test, probe arguments as flags, a
loop as its knobs, the setup and label of a trial."""
from __future__ import annotations

import pytest

from bisector.core.changes import Change, ChangeKind
from bisector.difference.knobs import apply_args, arg_changes, expand_loop, parse_args, render_args
from bisector.difference.diff_model import Setup
from bisector.difference.setups import (changes_between, package_under_test, read_lock, trial_label,
                                         trial_setup)
from bisector.errors import UsageError


def test_a_pip_freeze_file_reads_as_pins(tmp_path):
    lock = tmp_path / "freeze.txt"
    lock.write_text("# comment\nAccelerate==0.22.0\n\ntorch==2.13.0+cpu  # local build\nhuggingface_hub==0.17.1\n")
    assert read_lock(lock) == {"accelerate": "0.22.0", "torch": "2.13.0+cpu", "huggingface-hub": "0.17.1"}


@pytest.mark.parametrize("text, problem", [
    ("-e git+https://example.invalid/x.git#egg=x\n", ":1: '-e git+https"),
    ("ok==1.0\nthing @ file:///tmp/thing.whl\n", ":2: 'thing @ file:///tmp/thing.whl' is not a NAME==VERSION pin"),
    ("a==1.0\nA==2.0\n", ":2: a is pinned twice (1.0 and 2.0)"),
    ("a===1.0 extra words\n", ":1: 'a===1.0 extra words' is not"),
])
def test_a_lock_that_does_not_parse_names_the_line(tmp_path, text, problem):
    lock = tmp_path / "lock.txt"
    lock.write_text(text)
    with pytest.raises(UsageError) as info:
        read_lock(lock)
    assert problem in str(info.value) and "\n" not in str(info.value)


def test_the_package_under_test():
    assert package_under_test(None, {"accelerate": "0.22.0", "x": "1"}, {}, {}) == ("accelerate", "0.22.0")
    assert package_under_test("Transformers", {}, {"transformers": "4.38.2"}, {"transformers": "4.38.2"}) == (
        "transformers", "4.38.2")
    with pytest.raises(UsageError, match="must be at one version of transformers"):
        package_under_test("transformers", {}, {"transformers": "4.38.2"}, {"transformers": "4.39.0"})
    with pytest.raises(UsageError, match="name the package under test"):
        package_under_test(None, {}, {"a": "1"}, {"a": "2"})


def test_arguments_as_flags_and_back():
    args = ["--loop=trainer", "--sizes", "64,128", "--fast", "--max-grad-norm", "-1", "extra"]
    flags = parse_args(args)
    assert flags == {"--loop": "trainer", "--sizes": "64,128", "--fast": "", "--max-grad-norm": "-1", "": "extra"}
    assert render_args(flags) == ["--loop=trainer", "--sizes=64,128", "--fast", "--max-grad-norm=-1", "extra"]


def test_argument_changes_and_applying_them():
    changes = arg_changes(["--loop=trainer", "--fast", "--seed=1"], ["--loop=accelerate", "--seed=1", "--x=2"])
    assert [(c.name, c.a, c.b) for c in changes] == [("--loop", "trainer", "accelerate"), ("--fast", "", None),
                                                   ("--x", None, "2")]
    assert apply_args(["--loop=trainer", "--fast", "--seed=1"], changes, to_b=True) == [
        "--loop=accelerate", "--seed=1", "--x=2"]
    assert apply_args(["--loop=accelerate", "--seed=1", "--x=2"], changes[1:], to_b=False) == [
        "--loop=accelerate", "--seed=1", "--fast"]


TRAINER = {"loop": "trainer", "zero_grad_target": "model", "zero_grad_policy": "default", "max_grad_norm": 1.0,
           "lr_scheduler": "constant", "precision_via": "arg", "implied_by_loop": ["max_grad_norm"]}
ACCELERATE = {"loop": "accelerate", "zero_grad_target": "optimizer", "zero_grad_policy": "default",
              "max_grad_norm": 0.0, "lr_scheduler": "none", "precision_via": "arg", "implied_by_loop": []}


def test_a_loop_expands_into_the_knobs_that_differ():
    changes = arg_changes(["--loop=trainer", "--max-grad-norm=1.0", "--seed=2"], ["--loop=accelerate"])
    expanded = expand_loop(changes, TRAINER, ACCELERATE)
    assert [(c.kind, c.name, c.a, c.b, c.flag) for c in expanded] == [
        (ChangeKind.ARG, "--seed", "2", None, "--seed"),
        (ChangeKind.KNOB, "zero_grad_target", "model", "optimizer", "--zero-grad-target"),
        (ChangeKind.KNOB, "max_grad_norm", "1.0", "0.0", "--max-grad-norm"),
        (ChangeKind.KNOB, "lr_scheduler", "constant", "none", "--lr-scheduler")]
    assert expand_loop(arg_changes(["--seed=1"], ["--seed=2"]), TRAINER, ACCELERATE) is None
    assert expand_loop(changes, None, ACCELERATE) is None
    b = Setup(args=["--loop=accelerate"])
    knob = expanded[1]
    assert trial_setup(b, [knob], to_b=False).args == ["--loop=accelerate", "--zero-grad-target=model"]
    assert trial_label("B", [knob], to_b=False) == "B + zero_grad_target=model"


def test_package_changes_and_trial_setups():
    a = Setup(packages={"p1": "1.0", "p2": "1.0", "only-a": "3.0"}, args=["--x=1"])
    b = Setup(packages={"p1": "2.0", "p2": "1.0", "only-b": "4.0"}, args=["--x=2"])
    changes = changes_between(a, b)
    assert [c.describe() for c in changes] == ["only-a 3.0 → (none)", "only-b (none) → 4.0", "p1 1.0 → 2.0",
                                               "--x 1 → 2"]
    moved = trial_setup(a, changes[:3], to_b=True)
    assert moved.packages == {"p1": "2.0", "p2": "1.0", "only-b": "4.0"} and moved.args == ["--x=1"]
    assert trial_label("A", changes, to_b=True) == "A + no only-a, only-b==4.0, p1==2.0, --x=2"
    many = [Change(kind=ChangeKind.PACKAGE, name=f"q{i}", a="1", b="2") for i in range(7)]
    assert trial_label("A", many, to_b=True) == "A + q0==2, q1==2, q2==2, q3==2 (+3 more)"
