"""A diff's result is built once from typed parts (the search's answer, the run's record, what followed):
its commands are words, a result stored with them as strings reads back the same, and the bisect it
offers is made from the answer."""
from __future__ import annotations

import json
import shlex

from bisector.core.changes import Change, ChangeKind, Trial
from bisector.core.criterion import Criterion
from bisector.difference.diff_follow import follow_config
from bisector.difference.diff_model import DiffAnswer, DiffJob, DiffResult, DiffStatus, Setup
from bisector.difference.diff_report import render_diff_json, render_diff_text
from bisector.job.argv import run_argv
from bisector.job.probe import ScriptProbe

P4 = Change(kind=ChangeKind.PACKAGE, name="p4", a="1.0", b="2.0")
TRIALS = [Trial(seq=0, label="A", verdict="good", value=6.0, side="A"),
          Trial(seq=1, label="B", verdict="bad", value=305.0, side="B"),
          Trial(seq=2, label="A + p4==2.0", applied=["p4==2.0"], verdict="bad", value=305.0, side="B")]
ANSWER = DiffAnswer(status=DiffStatus.FOUND, reason="p4 moves A to B's side", criterion="kib > 155.5", trials=TRIALS,
                    changes=[P4], minimal=[P4], threshold=155.5, proof=[0, 1, 2], bound=3)
JOB = DiffJob(package="tinypkg", version="1.0", a=Setup(packages={"p4": "1.0", "p1": "1.0"}),
              b=Setup(packages={"p4": "2.0", "p1": "1.0"}), probe=ScriptProbe(path="sum_kib.py"),
              criterion=Criterion(metric="kib", auto=True))


def test_the_offered_bisect_is_made_from_the_answer():
    config = follow_config(JOB, ANSWER)
    assert (config.job.package, config.job.good, config.job.bad) == ("p4", "1.0", "2.0")
    assert {str(p) for p in config.job.pins} == {"p1==1.0", "tinypkg==1.0"}
    assert config.criterion.threshold == 155.5 and not config.criterion.auto
    assert follow_config(JOB, DiffAnswer(status=DiffStatus.NO_DIFFERENCE, reason="same", criterion="c",
                                         trials=TRIALS[:2])) is None
    assert (ANSWER.value("A"), ANSWER.value("B"), ANSWER.value("C")) == (6.0, 305.0, None)


def test_a_diffs_commands_are_words_and_one_stored_as_a_string_reads_back_the_same():
    follow = run_argv(follow_config(JOB, ANSWER))
    command = ["bisector", "diff", "--with", "tinypkg==1.0", "--a-arg=--loop=a b", "--json"]
    made = DiffResult(run_id="d1", status="found", reason=ANSWER.reason, package="tinypkg", version="1.0",
                      criterion=ANSWER.criterion, a=JOB.a, b=JOB.b, trials=TRIALS, minimal=[P4], changes=[P4],
                      command=command, follow_command=follow)
    stored = made.model_dump(mode="json")
    assert stored["command"] == shlex.join(command) and stored["follow_command"] == shlex.join(follow)
    again = DiffResult.model_validate(stored)     # a result stored before commands were words reads as words
    assert again.command == command and again.follow_command == follow and again == made
    assert f"bisect it with: {shlex.join(follow)}" in render_diff_text(again)
    assert json.loads(render_diff_json(again))["command"] == shlex.join(command)
