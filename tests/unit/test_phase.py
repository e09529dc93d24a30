"""One search phase as a table (fake measurements behind the seam, milliseconds): calibration of
relative rules, the search naming candidates by version, find-fix, the confirmation of the boundary
pair, k-way batches and what is prefetched; and --widen walking back."""
from __future__ import annotations

import pytest

from bisector.decide.judge import judge
from bisector.bisection.phase import Phase
from bisector.bisection.widen import walk_back
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.criterion import Criterion, calibrate
from bisector.core.measurement import Status
from bisector.core.search import Outcome
from bisector.core.verdict import Verdict
from bisector.errors import UndecidedError, UsageError
from tests.support.fakes import FakeMeasurer

VERSIONS = [f"1.{i}.0" for i in range(8)]
CANDS = [Candidate(package="p", kind=CandidateKind.RELEASE, ref=v) for v in VERSIONS]


def step_at(planted: int, special: dict | None = None, good: float = 1.0, bad: float = 2.0) -> dict:
    """Values by version: ``good`` below ``planted``, ``bad`` from it; ``special`` by index overrides."""
    table = {v: (bad if i >= planted else good) for i, v in enumerate(VERSIONS)}
    return {**table, **{VERSIONS[i]: entry for i, entry in (special or {}).items()}}


def run_phase(table: dict, jobs: int = 1, find_fix: bool = False, confirm: bool = False, prefetch: bool = True,
              **criterion):
    measurer, steps = FakeMeasurer(table, {}), []
    crit = Criterion(**{"metric": "m", "threshold": 1.5, **criterion})
    phase = Phase("releases", CANDS, measurer, crit, lambda name, c, j: steps.append((name, c.ref, j.verdict)),
                  jobs=jobs, prefetch=prefetch, find_fix=find_fix, confirm=confirm)
    return phase.run(), steps, measurer


@pytest.mark.parametrize("planted", range(1, 8))
@pytest.mark.parametrize("jobs", [1, 3])
def test_found_names_the_planted_release(planted, jobs):
    res, steps, _ = run_phase(step_at(planted), jobs=jobs)
    assert res.search.outcome is Outcome.FOUND
    assert (res.search.first_bad, res.search.last_good) == (planted, planted - 1)
    assert res.search.reason == (f"{VERSIONS[planted]} is the first bad candidate and "
                                 f"{VERSIONS[planted - 1]} the last good one")
    assert steps[:2] == [("releases", "1.0.0", Verdict.GOOD), ("releases", "1.7.0", Verdict.BAD)]
    assert set(res.judgements) == {VERSIONS.index(ref) for _, ref, _ in steps}


def test_predates_no_regression_and_skips_hiding_the_boundary():
    assert run_phase(step_at(0))[0].search.outcome is Outcome.PREDATES_RANGE
    assert run_phase(step_at(8))[0].search.outcome is Outcome.NO_REGRESSION
    hidden = run_phase(step_at(4, {3: Status.CRASHED, 4: Status.ENV_FAILED}))[0].search
    assert hidden.outcome is Outcome.UNDECIDED and hidden.ambiguous == (3, 4, 5) and hidden.last_good == 2
    assert hidden.reason.endswith("so the first bad one is any of 1.3.0..1.5.0")


@pytest.mark.parametrize("criterion, good, bad, threshold", [
    (dict(threshold=None, max_increase="50%"), 100.0, 400.0, 150.0),
    (dict(threshold=None, max_increase="10"), 100.0, 400.0, 110.0),
    (dict(threshold=None, max_increase="50%", direction="decrease"), 400.0, 100.0, 200.0),
    (dict(threshold=None, auto=True), 100.0, 400.0, 250.0),
])
def test_relative_rules_are_calibrated_on_the_endpoints(criterion, good, bad, threshold):
    res, steps, _ = run_phase(step_at(3, good=good, bad=bad), **criterion)
    assert res.calibrated.threshold == threshold and res.calibrated.good_value == good
    assert res.search.first_bad == 3
    assert res.calibrated.describe() == f"m {'<' if criterion.get('direction') else '>'} {threshold:g}"


def test_calibration_refusals():
    with pytest.raises(UsageError, match="auto criterion: endpoints do not differ beyond noise"):
        run_phase(step_at(3, good=1.0, bad=1.0), threshold=None, auto=True)
    with pytest.raises(UndecidedError, match="the good endpoint 1.0.0 gave no m: crashed in the fake probe"):
        run_phase(step_at(3, {0: Status.CRASHED}), threshold=None, max_increase="10%")


def test_find_fix_flips_verdicts_and_names_the_first_fixed():
    fixed = {v: (1.0 if i >= 5 else 2.0) for i, v in enumerate(VERSIONS)}  # bad until 1.5.0
    res, steps, _ = run_phase(fixed, find_fix=True)
    assert res.search.outcome is Outcome.FOUND and res.search.first_bad == 5
    assert steps[0] == ("releases", "1.0.0", Verdict.GOOD)   # measured bad, flipped: "still broken" is good


@pytest.mark.parametrize("last_good_again, first_bad_again, confirmed", [
    (1.0, 2.0, True),
    (1.0, 1.0, False),   # the first bad reads good when measured again
    (2.0, 2.0, False),
])
def test_confirmation_remeasures_the_pair_with_new_repeats(last_good_again, first_bad_again, confirmed):
    table = step_at(4, {3: [1.0] * 5 + [last_good_again], 4: [2.0] * 5 + [first_bad_again]})
    res, steps, measurer = run_phase(table, confirm=True)
    assert res.confirmed is confirmed
    assert [(name, ref) for name, ref, _ in steps[-2:]] == [("releases:confirm", "1.3.0"), ("releases:confirm", "1.4.0")]
    assert ("1.3.0", 5) in measurer.asked and ("1.4.0", 5) in measurer.asked   # max_repeats onwards


def test_no_confirmation_unless_found_or_asked():
    assert run_phase(step_at(8), confirm=True)[0].confirmed is None
    assert run_phase(step_at(4), confirm=False)[0].confirmed is None


def test_kway_batches_and_prefetch_of_the_next_round():
    res, steps, measurer = run_phase(step_at(5), jobs=3)
    assert len(steps) <= 2 + 2 * 3   # both endpoints, then rounds of 3
    assert measurer.prefetched and all(len(batch) <= 2 * 3 + 1 for batch in measurer.prefetched)
    pending = {ref for batch in measurer.prefetched for ref in batch}
    assert pending <= set(VERSIONS) and res.search.first_bad == 5
    assert run_phase(step_at(5), prefetch=False)[2].prefetched == []


class _Ordered(FakeMeasurer):
    """The fake, with its measurements and prefetch requests in one timeline."""

    def __init__(self, table):
        super().__init__(table, {})
        self.events: list[tuple[str, object]] = []

    def measure(self, c, repeat=0):
        self.events.append(("measure", c.ref))
        return super().measure(c, repeat)

    def prefetch(self, candidates):
        self.events.append(("prefetch", [c.ref for c in candidates]))
        super().prefetch(candidates)


def _phase_events(table: dict, jobs: int = 1):
    measurer = _Ordered(table)
    res = Phase("releases", CANDS, measurer, Criterion(metric="m", threshold=1.5), lambda *_: None, jobs=jobs).run()
    return res, measurer


@pytest.mark.parametrize("planted", [0, 8])
def test_endpoints_that_end_the_run_prefetch_nothing_inside_the_range(planted):
    res, measurer = _phase_events(step_at(planted))
    assert res.search.outcome in (Outcome.PREDATES_RANGE, Outcome.NO_REGRESSION)
    inside = {ref for batch in measurer.prefetched for ref in batch} - {VERSIONS[0], VERSIONS[-1]}
    assert inside == set()
    assert measurer.prefetched == [[VERSIONS[-1]], []]  # the waiting endpoint, then the queue dropped


@pytest.mark.parametrize("jobs", [1, 3])
def test_inner_candidates_are_prefetched_only_after_both_endpoints_are_judged(jobs):
    res, measurer = _phase_events(step_at(5), jobs=jobs)
    assert res.search.first_bad == 5
    assert measurer.warmed[0] == [(VERSIONS[0], 0), (VERSIONS[-1], 0)]  # both endpoints' workers start at once
    events = measurer.events
    first_inner = next(i for i, (kind, what) in enumerate(events)
                       if kind == "prefetch" and set(what) - {VERSIONS[0], VERSIONS[-1]})
    judged = [i for i, (kind, what) in enumerate(events) if kind == "measure" and what in (VERSIONS[0], VERSIONS[-1])]
    assert len(judged) == 2 and max(judged) < first_inner
    assert [e for e in events if e[0] == "prefetch"][-1] == ("prefetch", [])  # the answer is known: queue dropped
    asked = {ref for kind, ref in events if kind == "measure"}
    assert asked & {ref for batch in measurer.prefetched for ref in batch} - {VERSIONS[-1]}  # and it was used


# -- widen -------------------------------------------------------------------------------------

OLDER = [Candidate(package="p", kind=CandidateKind.RELEASE, ref=f"0.{i}.0") for i in range(10)]


def _walk(table: dict):
    measurer, seen, notes = FakeMeasurer(table, {}), [], []
    cal = calibrate(Criterion(metric="m", threshold=1.5))
    found = walk_back(OLDER, lambda c: judge(measurer, cal, c), lambda c, j: seen.append(c.ref), notes.append)
    return found, seen, notes


@pytest.mark.parametrize("good_below, found, tried", [
    (9, "0.9.0", ["0.9.0"]),
    (8, "0.8.0", ["0.9.0", "0.8.0"]),
    (6, "0.6.0", ["0.9.0", "0.8.0", "0.6.0"]),
    (3, "0.2.0", ["0.9.0", "0.8.0", "0.6.0", "0.2.0"]),   # steps of 1, 2, 4, 8 back
    (0, "0.0.0", ["0.9.0", "0.8.0", "0.6.0", "0.2.0", "0.0.0"]),
])
def test_widen_walks_back_in_growing_steps(good_below, found, tried):
    table = {c.ref: (1.0 if i <= good_below else 2.0) for i, c in enumerate(OLDER)}
    got, seen, _ = _walk(table)
    assert got is not None and got.ref == found and seen == tried


def test_widen_stops_where_compatibility_or_history_ends():
    skips = {c.ref: (Status.ENV_FAILED if i < 9 else 2.0) for i, c in enumerate(OLDER)}
    got, seen, notes = _walk(skips)
    assert got is None and seen == ["0.9.0", "0.8.0", "0.6.0"]
    assert notes[0] == ("--widen: the oldest release measured, 0.9.0, is BAD; compatibility ends around 0.6.0, "
                        "where releases cannot be measured here (0.8.0: env-failed: env-failed in the fake probe; "
                        "0.6.0: env-failed: env-failed in the fake probe): no older GOOD release found")
    got, _, notes = _walk({c.ref: 2.0 for c in OLDER})
    assert got is None and notes[0] == ("--widen: every release measured back to 0.0.0 is BAD (down to the oldest, "
                                        "0.0.0): the change is older than the package's measurable history")
    assert walk_back([], lambda c: None, lambda c, j: None, notes.append) is None
    assert notes[-1] == "--widen: there is no older release to try"
