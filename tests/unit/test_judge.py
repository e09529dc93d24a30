"""The judge as a table (fake measurements behind the seam, milliseconds): the threshold and its
direction, repeats and the noise-band rule, failure classes, metric-free and exit-code probes."""
from __future__ import annotations

import pytest

from bisector.decide.judge import judge
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.criterion import Criterion, calibrate
from bisector.core.measurement import Status
from bisector.core.verdict import Verdict
from tests.support.fakes import FakeMeasurer, PartialOom

C = Candidate(package="p", kind=CandidateKind.RELEASE, ref="1.0.0")
NOISY = dict(metric="m", threshold=1.5, repeats=3, noise=0.2)


def _judge(entry, first_repeat: int = 0, exit_code_mode: bool = False, **criterion):
    measurer = FakeMeasurer({"1.0.0": entry}, {}, exit_code_mode=exit_code_mode)
    j = judge(measurer, calibrate(Criterion(**criterion)), C, first_repeat)
    return j, measurer


@pytest.mark.parametrize("entry, criterion, verdict, repeats", [
    (2.0, dict(metric="m", threshold=1.5), Verdict.BAD, 1),
    (1.0, dict(metric="m", threshold=1.5), Verdict.GOOD, 1),
    (1.5, dict(metric="m", threshold=1.5), Verdict.GOOD, 1),                  # at the threshold is not beyond
    (1.0, dict(metric="m", threshold=1.5, direction="decrease"), Verdict.BAD, 1),
    (2.0, dict(metric="m", threshold=1.5, direction="decrease"), Verdict.GOOD, 1),
    ([1.0, 1.0, 1.0], NOISY, Verdict.GOOD, 3),
    ([2.0, 2.1, 1.9], NOISY, Verdict.BAD, 3),
    ([1.4, 1.4, 1.0, 1.0], NOISY, Verdict.GOOD, 4),      # median in the band: measured again until it is not
    ([1.4, 1.6, 1.4, 1.6, 1.5], NOISY, Verdict.SKIP, 5),  # straddles: unknown after max_repeats
    ([1.62] * 5, NOISY, Verdict.SKIP, 5),                  # beyond, but the median never leaves the band
    ([1.62] * 5, dict(NOISY, noise=0.0), Verdict.BAD, 3),  # no band without a noise level
    ([1.4, 1.6, 2.0, 2.0, 2.0, 2.0, 2.0], dict(NOISY, max_repeats=7), Verdict.SKIP, 7),  # one good repeat: never all bad
])
def test_threshold_repeats_and_noise_band(entry, criterion, verdict, repeats):
    j, _ = _judge(entry, **criterion)
    assert (j.verdict, len(j.measurements)) == (verdict, repeats), j.reason


def test_unknown_reasons_say_why_and_the_value_is_the_median():
    straddle, _ = _judge([1.4, 1.6, 1.4, 1.6, 1.5], **NOISY)
    assert straddle.reason.startswith("unknown: 5 repeats of m straddle the threshold 1.5 (median 1.5, range 1.4..1.6)")
    band, _ = _judge([1.62] * 5, **NOISY)
    assert band.reason.startswith("unknown: 5 repeats of m have their median within ±0.2 of the threshold 1.5")
    warm, _ = _judge([1.4, 1.4, 1.0, 1.0], **NOISY)
    assert warm.value == 1.2 and warm.metrics == {"m": 1.2, "other": 7.0} and warm.reason == "m=1.2 vs 1.5"


@pytest.mark.parametrize("status, criterion, verdict", [
    (Status.OOM, {}, Verdict.BAD),
    (Status.OOM, dict(oom_is_bad=False), Verdict.SKIP),
    (Status.CRASHED, {}, Verdict.SKIP),
    (Status.CRASHED, dict(crash_is_bad=True), Verdict.BAD),
    (Status.BAD_OUTPUT, dict(crash_is_bad=True), Verdict.BAD),
    (Status.TIMEOUT, {}, Verdict.SKIP),
    (Status.TIMEOUT, dict(timeout_is_bad=True), Verdict.BAD),
    (Status.IMPORT_FAILED, dict(crash_is_bad=True), Verdict.SKIP),
    (Status.ENV_FAILED, dict(crash_is_bad=True, timeout_is_bad=True), Verdict.SKIP),
])
@pytest.mark.parametrize("metric", ["m", None], ids=["metric", "metric-free"])
def test_failure_classes(status, criterion, verdict, metric):
    j, _ = _judge(status, metric=metric, threshold=1.5 if metric else None, **criterion)
    assert j.verdict is verdict and j.value is None
    assert j.reason.startswith(f"{status.value}: ")
    if status is Status.OOM and verdict is Verdict.BAD:
        assert "out of memory counts as the regression" in j.reason


def test_a_partial_oom_is_bad_when_oom_counts_as_the_regression():
    """The largest GA=2 cell ran out of memory, the others fitted a GOOD-looking value."""
    j, _ = _judge(PartialOom(1.0), metric="m", threshold=1.5)
    assert j.verdict is Verdict.BAD and "cells bf16.ga2.h256 ran out of memory" in j.reason and j.value == 1.0
    j, _ = _judge(PartialOom(1.0), metric="m", threshold=1.5, oom_is_bad=False)
    assert j.verdict is Verdict.GOOD  # then the metric, fitted from complete groups only, decides


def test_a_repeat_that_fails_among_good_ones_does_not_decide():
    j, _ = _judge([1.0, Status.CRASHED, 1.0], **NOISY)
    assert j.verdict is Verdict.GOOD and j.value == 1.0 and len(j.measurements) == 3


def test_metric_missing_and_metric_free_probes():
    missing, _ = _judge(1.0, metric="absent", threshold=1.0)
    assert missing.verdict is Verdict.SKIP and missing.reason == "metric absent missing from the probe result"
    free, _ = _judge(1.0)
    assert free.verdict is Verdict.GOOD and free.reason == "probe succeeded" and free.value is None


@pytest.mark.parametrize("code, verdict", [(0, Verdict.GOOD), (1, Verdict.BAD), (127, Verdict.BAD),
                                           (125, Verdict.SKIP), (128, Verdict.SKIP), (-9, Verdict.SKIP),
                                           (Status.ENV_FAILED, Verdict.SKIP)])
def test_exit_code_probes_follow_git_bisect_run(code, verdict):
    j, _ = _judge(code, exit_code_mode=True, metric="m", threshold=1.0)  # a metric is ignored in exit-code mode
    assert j.verdict is verdict and j.value is None and len(j.measurements) == 1


def test_first_repeat_takes_new_repeats_for_confirmation():
    _, measurer = _judge([9.0, 9.0, 9.0, 9.0, 9.0, 1.0, 1.0, 1.0], first_repeat=5, **NOISY)
    assert measurer.asked == [("1.0.0", 5), ("1.0.0", 6), ("1.0.0", 7)]

