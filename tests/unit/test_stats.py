"""Stats mode as tables (fake measurements behind the seam, milliseconds): the comparison core, the
interleaved judge (order of samples, DIFFERENT / SAME / UNKNOWN, the effect floor, failures, the
repeat indices that make resumes exact), the phase's endpoints, the config rules and the reports."""
from __future__ import annotations

import json
import random

import pytest

from bisector.decide.paired import PairedJudge, boundary_evidence
from bisector.bisection.stats_phase import StatsPhase
from bisector.job.config import JobConfig
from bisector.job.layering import validated
from bisector.job.jobfile import stack
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.criterion import Criterion
from bisector.core.measurement import Status
from bisector.core.result import BisectResult
from bisector.core.search import Outcome
from bisector.core.stats import (CONFIRM_ALPHA, Comparison, compare_samples, drifted, same_threshold, superiority,
                                 superiority_lower_bound)
from bisector.core.verdict import Verdict
from bisector.errors import UsageError
from bisector.report.render import render
from tests.support.fakes import FakeMeasurer

VERSIONS = [f"1.{i}.0" for i in range(8)]
CANDS = [Candidate(package="p", kind=CandidateKind.RELEASE, ref=v) for v in VERSIONS]
GOOD, CAND = CANDS[0], CANDS[3]


def noisy(level: float, seed: int, count: int = 2000, noise: float = 0.25) -> list[float]:
    """A seeded sample: ``level * (1 + U(-noise, noise))`` per repeat."""
    rng = random.Random(seed)
    return [level * (1 + rng.uniform(-noise, noise)) for _ in range(count)]


def stats(**extra) -> Criterion:
    return Criterion(metric="m", compare="stats", **extra)


# -- the comparison core -----------------------------------------------------------------------------

def test_one_sided_tests_look_in_the_regression_direction():
    good, slower = noisy(1.0, 1, 30), noisy(1.3, 2, 30)
    up = compare_samples(good, slower)
    assert up.comparison is Comparison.DIFFERENT and up.p_value == min(up.p_mwu, up.p_ks) < 1e-6
    assert 0.2 < up.effect < 0.4 and up.shift > 0 and (up.n_good, up.n_candidate) == (30, 30)
    assert compare_samples(slower, good).comparison is not Comparison.DIFFERENT      # faster is no regression
    assert compare_samples(slower, good, increase=False).comparison is Comparison.DIFFERENT
    assert compare_samples(good, slower, increase=False).effect < 0


def test_same_needs_more_samples_for_a_smaller_regression():
    thresholds = [same_threshold(n, n, 0.8) for n in (5, 10, 20, 40)]
    assert thresholds == sorted(thresholds, reverse=True) and thresholds[0] > 0.5 and thresholds[-1] < 0.05
    assert same_threshold(20, 20, 0.7) > same_threshold(20, 20, 0.9)
    assert same_threshold(20, 20, 0.5) == 1.0                                        # nothing to rule out: never SAME
    same = compare_samples(noisy(1.0, 3, 60), noisy(1.0, 4, 60), rule_out=0.82)
    assert same.comparison is Comparison.SAME and same.p_value > same.same_above


def test_constant_samples_and_the_size_of_a_regression():
    assert compare_samples([2.0] * 6, [2.0] * 6, rule_out=0.75).comparison is Comparison.SAME
    assert compare_samples([2.0] * 8, [3.0] * 8).comparison is Comparison.DIFFERENT
    assert superiority([1, 2], [3, 4]) == 1.0 and superiority([1, 2], [2, 2]) == 0.75
    assert superiority([1, 2], [3, 4], increase=False) == 0.0
    good, bad = noisy(1.0, 5, 40), noisy(1.2, 6, 40)
    assert 0.6 < superiority_lower_bound(good, bad) < superiority(good, bad) < 0.95


def test_drift_between_two_stretches_of_time():
    assert drifted(noisy(1.0, 7, 30), noisy(1.15, 8, 30))
    assert not drifted(noisy(1.0, 7, 30), noisy(1.0, 8, 30))


# -- the interleaved judge ---------------------------------------------------------------------------

def judge_of(table: dict, criterion: Criterion, bad_level: float = 1.2):
    measurer = FakeMeasurer({"1.0.0": noisy(1.0, 11), "1.7.0": noisy(bad_level, 12), **table}, {})
    paired = PairedJudge(measurer, criterion, GOOD, CANDS[-1], len(CANDS))
    return paired, measurer


def test_samples_are_interleaved_good_then_candidate_with_slotted_repeats():
    paired, measurer = judge_of({"1.3.0": noisy(1.2, 13)}, stats())
    paired.endpoints()
    assert measurer.asked[:4] == [("1.0.0", 0), ("1.7.0", 0), ("1.0.0", 1), ("1.7.0", 1)]
    measurer.asked.clear()
    j = paired.judge(CAND, slot=3)
    asked = measurer.asked
    assert [ref for ref, _ in asked] == ["1.0.0", "1.3.0"] * (len(asked) // 2)
    assert [r for ref, r in asked if ref == "1.3.0"] == list(range(len(asked) // 2))
    assert [r for ref, r in asked if ref == "1.0.0"] == list(range(300, 300 + len(asked) // 2))  # slot 3 x 100
    assert j.verdict is Verdict.BAD and j.reason.startswith("different: p=")
    assert j.evidence.vs_good.comparison is Comparison.DIFFERENT and len(j.evidence.samples) == len(j.measurements)


def test_each_comparison_first_readies_both_sides_at_once():
    """Both workers of a comparison start together, with the first samples each side will take."""
    paired, measurer = judge_of({"1.3.0": noisy(1.2, 13), "1.4.0": noisy(1.2, 14)}, stats())
    paired.endpoints()
    paired.judge(CAND, slot=3)
    c4 = next(c for c in CANDS if c.ref == "1.4.0")
    paired.confirm_step(CAND, 100, c4, 100)
    assert measurer.warmed == [[("1.0.0", 0), ("1.7.0", 0)], [("1.0.0", 300), ("1.3.0", 0)],
                               [("1.3.0", 100), ("1.4.0", 100)]]


@pytest.mark.parametrize("level, extra, verdict, why", [
    (1.2, {}, Verdict.BAD, "different: "),
    (1.0, {}, Verdict.GOOD, "same: "),
    (0.8, {}, Verdict.GOOD, "same: "),                                   # faster: no regression
    (1.08, dict(min_effect="20%"), Verdict.GOOD, "different by less than min-effect 20%"),
    (1.08, dict(min_effect="0.5"), Verdict.GOOD, "different by less than min-effect 0.5"),  # an absolute floor
])
def test_verdicts(level, extra, verdict, why):
    paired, _ = judge_of({"1.3.0": noisy(level, 14, noise=0.05 if level == 1.08 else 0.25)}, stats(**extra))
    paired.endpoints()
    j = paired.judge(CAND, slot=3)
    assert j.verdict is verdict and j.reason.startswith(why), j.reason


def test_unknown_asks_for_more_rounds_then_skips_with_its_numbers():
    # halfway between good and bad: never decided; a first round of 5 pairs, then a pair at a time up to max_repeats
    paired, measurer = judge_of({"1.3.0": noisy(1.1, 15)}, stats(max_repeats=30))
    paired.endpoints()
    j = paired.judge(CAND, slot=3)
    assert j.verdict is Verdict.SKIP and len(j.measurements) == 30
    assert j.reason.startswith("unknown: p=") and "30 vs" in j.reason and "SAME needs p above" in j.reason
    assert [r for ref, r in measurer.asked if ref == "1.3.0"] == list(range(30))   # every sample taken was kept
    assert sum(k.startswith("1.3.0:") for k in measurer.seen) == 30


@pytest.mark.parametrize("failure, verdict", [(Status.OOM, Verdict.BAD), (Status.CRASHED, Verdict.SKIP)])
def test_a_failed_sample_ends_the_judgement_by_its_class(failure, verdict):
    paired, _ = judge_of({"1.3.0": [1.0, 1.0, failure]}, stats())
    paired.endpoints()
    j = paired.judge(CAND, slot=3)
    assert j.verdict is verdict and len(j.measurements) == 3 and j.reason.startswith(failure.value)


# -- the phase ---------------------------------------------------------------------------------------

def phase_of(levels: list[float], seen: dict | None = None, **extra):
    table = {v: noisy(level, 100 + i) for i, (v, level) in enumerate(zip(VERSIONS, levels))}
    measurer, steps = FakeMeasurer(table, {} if seen is None else seen), []
    phase = StatsPhase("releases", CANDS, measurer, stats(**extra), lambda n, c, j: steps.append((n, c.ref, j)),
                       confirm=True)
    return phase.run(), steps, measurer


def test_phase_names_the_planted_step_and_confirms_it():
    res, steps, _ = phase_of([1.0] * 5 + [1.2] * 3)
    assert res.search.outcome is Outcome.FOUND and res.search.first_bad == 5 and res.confirmed
    reference = int(steps[0][2].reason.removeprefix("the reference: ").split()[0])
    assert reference >= 12   # the endpoints' round: 12 pairs at least
    assert [name for name, _, _ in steps].count("releases:confirm") == 1 and steps[-1][0] == "releases:confirm"
    assert steps[-1][1] == "1.5.0" and steps[-1][2].reason.startswith("against 1.4.0's fresh samples: different")


def test_the_confirmation_compares_the_boundary_pair_with_each_other_on_fresh_samples():
    paired, measurer = judge_of({"1.3.0": noisy(1.0, 21), "1.4.0": noisy(1.2, 22), "1.5.0": noisy(1.2, 23)}, stats())
    paired.endpoints()
    measurer.asked.clear()
    c3, c4, c5 = (next(c for c in CANDS if c.ref == v) for v in ("1.3.0", "1.4.0", "1.5.0"))
    step = paired.confirm_step(c3, 100, c4, 100)
    asked = measurer.asked
    assert [ref for ref, _ in asked] == ["1.3.0", "1.4.0"] * (len(asked) // 2)           # interleaved, both fresh
    assert {r for _, r in asked} == set(range(100, 100 + len(asked) // 2))
    assert step.verdict is Verdict.BAD and step.evidence.vs_good.n_good == len(asked) // 2
    same = paired.confirm_step(c4, 100, c5, 100)                                        # no step between them
    assert same.verdict is not Verdict.BAD and "against 1.4.0's fresh samples" in same.reason



def test_the_confirmation_passes_only_below_its_per_look_level_and_stops_at_the_first_look_there():
    """Five pairs fully apart give p = 1/252 = 0.004: a pass at 1% a look, not at CONFIRM_ALPHA (0.2%);
    a real step passes at the first look at or below it, each earlier look above it."""
    apart = {"1.3.0": [1.00, 1.01, 1.02, 1.03, 1.04], "1.4.0": [1.10, 1.11, 1.12, 1.13, 1.14]}
    # five pairs at most (a cap no run may set at this alpha: tests/process/test_hostile.py, "stats with fewer pairs")
    paired, _ = judge_of(apart, stats().model_copy(update={"max_repeats": 5}))
    c3, c4 = (next(c for c in CANDS if c.ref == v) for v in ("1.3.0", "1.4.0"))
    j = paired.confirm_step(c3, 0, c4, 0)
    assert j.verdict is Verdict.SKIP and j.evidence.vs_good.p_value == pytest.approx(1 / 252)
    assert j.evidence.vs_good.alpha == CONFIRM_ALPHA < 1 / 252 < 0.01
    paired, _ = judge_of({"1.3.0": noisy(1.0, 31), "1.4.0": noisy(1.2, 32)}, stats())
    paired.endpoints()
    step = paired.confirm_step(c3, 100, c4, 100)
    good, bad = step.evidence.reference, step.evidence.samples
    assert step.verdict is Verdict.BAD and step.evidence.vs_good.p_value <= CONFIRM_ALPHA
    for n in range(5, len(bad)):
        assert compare_samples(good[:n], bad[:n], rule_out=paired.rule_out).p_value > CONFIRM_ALPHA

def test_no_step_is_no_regression_and_undecided_endpoints_stop_before_the_search():
    res, steps, _ = phase_of([1.0] * 8)
    assert res.search.outcome is Outcome.NO_REGRESSION and len(steps) == 2
    res, steps, measurer = phase_of([1.0] * 7 + [1.1], max_repeats=20)
    assert res.search.outcome is Outcome.UNDECIDED and "could not be told apart" in res.search.reason
    assert [ref for _, ref, _ in steps] == ["1.0.0", "1.7.0"] and measurer.probes_run == 40


def test_a_rerun_asks_for_the_same_samples_and_reuses_them_all():
    seen: dict = {}
    first, _, m1 = phase_of([1.0] * 3 + [1.2] * 5, seen)
    again, _, m2 = phase_of([1.0] * 3 + [1.2] * 5, seen)
    assert m1.probes_run > 100 and m2.probes_run == 0 and m2.asked == m1.asked
    assert again.search == first.search


# -- config and reports ------------------------------------------------------------------------------

def test_stats_defaults_and_refusals():
    c = stats()
    assert (c.repeats, c.max_repeats, c.min_effect, c.alpha) == (5, 100, "5%", 0.0002) and c.should_confirm
    assert Criterion(metric="m", compare="stats", repeats=3, max_repeats=9).max_repeats == 9
    assert stats().effect_floor(2.0) == pytest.approx(0.1) and stats(min_effect="0.3").effect_floor(2.0) == 0.3
    for bad in (dict(threshold=1.0), dict(max_increase="10%"), dict(auto=True)):
        with pytest.raises(ValueError, match="give min_effect"):
            stats(**bad)
    with pytest.raises(ValueError, match="needs a metric"):
        Criterion(compare="stats")
    job = {"job": {"package": "p", "good": "1", "bad": "2"}}
    def build(lower: dict, upper: dict) -> JobConfig:
        return validated(JobConfig, stack(lower, upper), "t")

    with pytest.raises(UsageError, match="find_fix is not supported"):
        build({**job, "criterion": {"metric": "m", "compare": "stats"}}, {"job": {"find_fix": True}})
    layered = build({**job, "criterion": {"metric": "m", "threshold": 2.0}}, {"criterion": {"compare": "stats"}})
    assert layered.criterion.compare == "stats" and layered.criterion.threshold is None  # --compare stats drops the file's rule
    with pytest.raises(UsageError, match="an exit-code probe has none"):
        build({**job, "probe": {"cmd": "true"}, "criterion": {"metric": "m", "compare": "stats"}}, {})


def test_reports_show_the_boundary_samples_p_values_and_shift():
    res, _, _ = phase_of([1.0] * 5 + [1.2] * 3)
    evidence = boundary_evidence(res.judgements, res.search.last_good, res.search.first_bad)
    result = BisectResult(run_id="r1", package="p", mode="release", status="found", reason="x", criterion="c",
                          metric="m", evidence=evidence,
                          first_bad={"ref": "1.5.0", "kind": "release", "value": 1.2},
                          last_good={"ref": "1.4.0", "kind": "release", "value": 1.0})
    text = render(result, "text")
    assert "samples: first bad 1.5.0: " in text and "DIFFERENT" in text and "samples: last good 1.4.0: " in text
    md = render(result, "markdown")
    assert "| first bad | `1.5.0` |" in md and "<summary>Every sample</summary>" in md
    data = json.loads(render(result, "json"))
    assert data["evidence"]["first_bad"]["vs_good"]["comparison"] == "different"
    assert len(data["evidence"]["first_bad"]["samples"]) == data["evidence"]["first_bad"]["vs_good"]["n_candidate"]
    plain = BisectResult(run_id="r1", package="p", mode="release", status="found", reason="x", criterion="c")
    assert "evidence" not in json.loads(render(plain, "json"))
