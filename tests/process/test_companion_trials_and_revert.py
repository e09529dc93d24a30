"""Companion attribution's decisions (bisection.attribution) over tables of what each setup measures,
and the culprit's confirmation by revert (bisection.revert) on real generated git repositories.
Measuring is a table here (the judge of each setup); the slow tests in test_attribution_e2e.py build
the real environments."""
from __future__ import annotations

import datetime as dt
import subprocess

import pytest

from bisector.bisection.companion_trials import attribute
from bisector.decide.judge import Judgement
from bisector.bisection.revert import confirm_by_revert
from bisector.core.changes import AttributionKind, ConfirmationStatus
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.ddmin import single_bound
from bisector.core.verdict import Verdict
from bisector.sources import git
from tests.support.gitrepo import commit, init_repo

LAST_GOOD = Candidate(package="alpha", kind=CandidateKind.RELEASE, ref="1.0")
FIRST_BAD = Candidate(package="alpha", kind=CandidateKind.RELEASE, ref="2.0")


def table(rule):
    """A judge of setups: ``rule(candidate_ref, pins)`` gives BAD / GOOD / SKIP; records every setup."""
    seen = []

    def judge_setup(label, c, pins):
        verdict = rule(c.ref, pins)
        seen.append((c.ref, dict(pins)))
        value = {Verdict.BAD: 2.0, Verdict.GOOD: 1.0}.get(verdict)
        return Judgement(verdict, f"m={value}" if value else "skip: env failed", value, [])
    return judge_setup, seen


def verdict(flag):
    return Verdict.BAD if flag else Verdict.GOOD


def test_the_candidate_itself_takes_one_trial():
    judge, seen = table(lambda ref, pins: verdict(ref == "2.0"))
    a = attribute("alpha", LAST_GOOD, FIRST_BAD, {"beta": ["1.0", "2.0"], "gamma": ["3.0", "3.1"]}, judge)
    assert a.kind is AttributionKind.CANDIDATE and a.packages == ["alpha"]
    assert seen == [("2.0", {"beta": "1.0", "gamma": "3.0"})]      # the first bad, every companion pinned back
    assert a.proof == [0] and a.trials[0].label == "alpha 2.0 + beta==1.0, gamma==3.0"
    assert a.reason.startswith("alpha 2.0 itself")


def test_one_companion_is_named_with_the_proof_both_ways():
    judge, seen = table(lambda ref, pins: verdict(pins["beta"] == "2.0"))
    a = attribute("alpha", LAST_GOOD, FIRST_BAD, {"beta": ["1.0", "2.0"]}, judge)
    assert a.kind is AttributionKind.COMPANION and a.packages == ["beta"]
    assert [(t.label, t.verdict) for t in a.trials] == [("alpha 2.0 + beta==1.0", Verdict.GOOD),
                                                       ("alpha 1.0 + beta==2.0", Verdict.BAD)]
    assert a.proof == [0, 1] and a.minimal[0].describe() == "beta 1.0 → 2.0"
    assert "the last good with only that change, alpha 1.0 + beta==2.0 measured BAD" in a.reason


@pytest.mark.parametrize("culprit", ["b1", "b3", "b5"])
def test_one_companion_among_five_within_the_bound(culprit):
    moved = {f"b{i}": ["1.0", "2.0"] for i in range(1, 6)}
    judge, seen = table(lambda ref, pins: verdict(pins[culprit] == "2.0"))
    a = attribute("alpha", LAST_GOOD, FIRST_BAD, moved, judge)
    assert a.kind is AttributionKind.COMPANION and a.packages == [culprit]
    assert len(seen) == len(a.trials) <= a.bound == single_bound(6) + 2
    necessity = [t for t in a.trials if t.applied == ["alpha"] + [n for n in moved if n != culprit]]
    assert necessity and necessity[0].verdict is Verdict.GOOD and necessity[0].seq in a.proof


def test_two_companions_that_regress_only_together_are_an_interaction():
    judge, _ = table(lambda ref, pins: verdict(pins["beta"] == "2.0" and pins["gamma"] == "2.0"))
    a = attribute("alpha", LAST_GOOD, FIRST_BAD, {"beta": ["1.0", "2.0"], "gamma": ["1.0", "2.0"]}, judge)
    assert a.kind is AttributionKind.INTERACTION and a.packages == ["beta", "gamma"]
    assert a.reason.startswith("only beta 1.0 → 2.0 and gamma 1.0 → 2.0 together")
    assert {tuple(a.trials[i].applied) for i in a.proof} >= {("beta", "gamma"), ("beta",), ("gamma",)}


def test_the_candidate_with_a_companion_is_an_interaction_too():
    judge, _ = table(lambda ref, pins: verdict(ref == "2.0" and pins["beta"] == "2.0"))
    a = attribute("alpha", LAST_GOOD, FIRST_BAD, {"beta": ["1.0", "2.0"]}, judge)
    assert a.kind is AttributionKind.INTERACTION and a.packages == ["alpha", "beta"]


def test_a_second_cause_is_said_in_the_reason():
    judge, _ = table(lambda ref, pins: verdict(pins["beta"] == "2.0" or pins["gamma"] == "2.0"))
    a = attribute("alpha", LAST_GOOD, FIRST_BAD, {"beta": ["1.0", "2.0"], "gamma": ["1.0", "2.0"]}, judge)
    assert a.kind is AttributionKind.COMPANION and "another change gives the step as well" in a.reason


def test_a_skip_where_it_matters_is_undecided():
    def rule(ref, pins):
        if pins["beta"] == "2.0" and pins["gamma"] == "1.0":
            return Verdict.SKIP                     # beta 2.0 does not install next to gamma 1.0
        return verdict(pins["beta"] == "2.0")
    judge, _ = table(rule)
    a = attribute("alpha", LAST_GOOD, FIRST_BAD, {"beta": ["1.0", "2.0"], "gamma": ["1.0", "2.0"]}, judge)
    assert a.kind is AttributionKind.UNDECIDED and "could not be judged" in a.reason
    assert a.packages == [] and any(t.verdict is Verdict.SKIP for t in a.trials)


def test_a_package_absent_on_the_good_side_is_left_unpinned_there():
    judge, seen = table(lambda ref, pins: verdict("beta" in pins))
    a = attribute("alpha", LAST_GOOD, FIRST_BAD, {"beta": ["-", "2.0"]}, judge)
    assert a.kind is AttributionKind.COMPANION and seen[0] == ("2.0", {})
    assert a.minimal[0].describe() == "beta (none) → 2.0"


# -- confirmation by revert: real git repositories, the measurement a table ---------------------------
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def history(tmp_path, later_same_line: bool):
    """0: good; 1: the step (KIB 100 -> 400); 2: an unrelated file; 3 (optional): the same line again."""
    repo = init_repo(tmp_path / "r")
    shas = [commit(repo, {"pkg.py": "A = 1\nKIB = 100\nB = 2\n"}, "start", T0)]
    shas.append(commit(repo, {"pkg.py": "A = 1\nKIB = 400\nB = 2\n"}, "the step (#7)", T0 + dt.timedelta(days=1)))
    shas.append(commit(repo, {"notes.txt": "x\n"}, "notes", T0 + dt.timedelta(days=2)))
    if later_same_line:
        shas.append(commit(repo, {"pkg.py": "A = 1\nKIB = 300\nB = 2\n"}, "tune", T0 + dt.timedelta(days=3)))
    return repo, shas


def commit_candidate(sha):
    return Candidate(package="pkg", kind=CandidateKind.COMMIT, ref=sha)


@pytest.mark.parametrize("measured, status", [(Verdict.GOOD, ConfirmationStatus.CONFIRMED),
                                              (Verdict.BAD, ConfirmationStatus.NOT_CAUSAL),
                                              (Verdict.SKIP, ConfirmationStatus.UNDECIDED)])
def test_revert_applies_and_the_reverted_tree_is_measured(tmp_path, measured, status):
    repo, shas = history(tmp_path, later_same_line=False)
    judged = []

    def judge(c):
        judged.append(c)
        return Judgement(measured, "m", 1.0 if measured is Verdict.GOOD else None, [])
    conf = confirm_by_revert(repo, commit_candidate(shas[1]), commit_candidate(shas[2]), judge, tmp_path / "s")
    assert conf.status is status and conf.culprit == shas[1] and conf.onto == shas[2]
    assert judged == [commit_candidate(shas[2]).model_copy(update={"revert": shas[1]})]
    shown = subprocess.run(["git", "-C", str(repo), "show", f"{conf.tree}:pkg.py"], capture_output=True, text=True)
    assert "KIB = 100" in shown.stdout and "notes.txt" in git.run_git(git.repository(repo), "ls-tree", conf.tree)
    assert subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True,
                          text=True).stdout == ""                      # the user's index and tree untouched


def test_a_later_change_of_the_same_line_is_a_revert_conflict(tmp_path):
    repo, shas = history(tmp_path, later_same_line=True)
    conf = confirm_by_revert(repo, commit_candidate(shas[1]), commit_candidate(shas[3]),
                             lambda c: pytest.fail("a conflicting revert is not measured"), tmp_path / "s")
    assert conf.status is ConfirmationStatus.REVERT_CONFLICT and conf.conflicts == ["pkg.py"]
    assert conf.tree is None and "conflicts in pkg.py" in conf.reason
