"""A two-sided rule (``--max-change X``, ``--compare exact``, ``--max-change auto``): BAD when the value moves from
the good end's in either direction; the good end measured twice before anything is bisected, and a program that
does not repeat within the tolerance refused in one line (noise is not a change)."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from bisector.bisection.phase import Phase
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.criterion import Compare, Criterion, calibrate
from bisector.core.rule_text import describe_against_baseline, describe_rule
from bisector.core.search import Outcome
from bisector.errors import UsageError
from tests.support.fakes import FakeMeasurer

VERSIONS = [f"1.{i}.0" for i in range(8)]
CANDS = [Candidate(package="p", kind=CandidateKind.RELEASE, ref=v) for v in VERSIONS]


def run(table: dict, find_fix: bool = False, **criterion):
    measurer, notes = FakeMeasurer(table, {}), []
    phase = Phase("releases", CANDS, measurer, Criterion(metric="m", **criterion), lambda *a: None,
                  find_fix=find_fix, on_note=notes.append)
    return phase.run(), notes, measurer


def planted(at: int, good, bad) -> dict:
    return {v: (bad if i >= at else good) for i, v in enumerate(VERSIONS)}


@pytest.mark.parametrize("at", [1, 4, 7])
def test_a_fall_is_found_like_a_rise(at):
    """transformers 4.46's GA loss normalization: the first step's gradient norm fell from 1.4276 to 1.2617."""
    for good, bad in ((1.4276, 1.2617), (1.2617, 1.4276)):
        res, _, _ = run(planted(at, good, bad), max_change="1%")
        assert res.search.outcome is Outcome.FOUND and res.search.first_bad == at
        assert res.calibrated.tolerance == pytest.approx(abs(good) * 0.01)


def test_the_tolerance_decides_what_is_a_change():
    """A computation scaled by 1.001: found at 0.05%, no regression at 1%."""
    table = planted(5, 2.0, 2.0 * 1.001)
    assert run(table, max_change="0.05%")[0].search.first_bad == 5
    assert run(table, max_change="1%")[0].search.outcome is Outcome.NO_REGRESSION
    assert run(table, max_change="0.001")[0].search.first_bad == 5


def test_exact_counts_any_change_at_all():
    res, _, _ = run(planted(3, 0.1 + 0.2, 0.3), compare="exact")   # 0.30000000000000004 -> 0.3
    assert res.search.first_bad == 3 and res.calibrated.tolerance == 0
    assert res.calibrated.describe() == "m differs from the good end's 0.30000000000000004 at all (bit-equality)"


def test_the_good_end_is_measured_twice_and_noise_is_refused_in_one_line():
    table = {**planted(4, 1.0, 1.5), VERSIONS[0]: [1.0, 1.01]}
    with pytest.raises(UsageError, match=r"^the good end 1\.0\.0 does not repeat: m 1\.0 then 1\.01 \(0\.01 apart, "
                                         r"beyond the tolerance 0\.005\): the program is not deterministic and noise "
                                         r"is not a change; --compare stats judges by samples$"):
        run(table, max_change="0.5%")
    res, _, measurer = run(planted(4, 1.0, 1.5), max_change="0.5%")
    assert ("1.0.0", 1) in measurer.asked and res.search.first_bad == 4


def test_auto_takes_its_tolerance_from_the_good_ends_repeats():
    exact, notes, _ = run(planted(4, 1.0, 1.0 + 1e-9), max_change="auto")
    assert exact.search.first_bad == 4 and notes == [
        "the good end 1.0.0 repeats exactly (m 1.0 twice): any change counts (--max-change auto)"]
    noisy = {**planted(4, 1.0, 1.002), VERSIONS[0]: [1.0, 1.001]}
    res, notes, _ = run(noisy, max_change="auto")
    assert res.search.outcome is Outcome.NO_REGRESSION and res.calibrated.tolerance == pytest.approx(0.005)
    assert notes[0].startswith("the good end 1.0.0's two runs differ by 0.001: a change beyond 0.005 counts (5x")
    assert run({**planted(4, 1.0, 1.1), VERSIONS[0]: [1.0, 1.001]}, max_change="auto")[0].search.first_bad == 4


def test_find_fix_reads_the_change_from_the_fixed_end():
    res, _, _ = run(planted(3, 5.0, 1.0), find_fix=True, max_change="1%")
    assert res.search.outcome is Outcome.FOUND and res.search.first_bad == 3


@pytest.mark.parametrize("given, message", [
    (dict(max_change="1%", threshold=2.0), "give only one of threshold, max_increase, max_change, auto"),
    (dict(compare="exact", max_change="1%"), "compare = exact is bit-equality"),
    (dict(max_change="a lot"), "is not a change like '1%', '0.01' or 'auto'"),
    (dict(compare="stats", max_change="1%"), "give min_effect, not threshold, max_increase, max_change or auto"),
])
def test_a_two_sided_rule_is_one_rule(given, message):
    with pytest.raises(ValidationError, match=message):
        Criterion(metric="m", **given)


def test_two_sided_rules_in_words_and_in_a_stored_job():
    c = Criterion(metric="loss_first", max_change="1%")
    assert c.two_sided and "the good end measured twice first" in describe_rule(c)
    assert describe_against_baseline(c) == "loss_first moves more than 1% from the baseline cell, either way"
    assert calibrate(c, 0.758).describe() == "loss_first moves more than 0.00758 (1%) from the good end's 0.758, either way"
    assert "max_change" not in Criterion(metric="m", threshold=1.0).model_dump()   # old jobs keep their config hash
    assert Criterion(metric="m", compare=Compare.EXACT).two_sided
