"""Tests for the pure search core (bisector.search)."""
from __future__ import annotations

import collections
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bisector.core.search import Outcome, Search, SearchResult, least_satisfying
from bisector.core.verdict import Verdict

G, B, S = Verdict.GOOD, Verdict.BAD, Verdict.SKIP
LETTERS = {"g": G, "b": B, "s": S}


def parse(pattern: str) -> list[Verdict]:
    """'ggsbb' -> [G, G, S, B, B]."""
    return [LETTERS[c] for c in pattern]


def drive(verdicts: list[Verdict], jobs: int = 1) -> tuple[SearchResult, int, collections.Counter]:
    """Run a Search over a fixed verdict list; return (result, rounds, calls per index).

    Also checks the batch contract on the way: first batch is both endpoints, later
    batches hold 1..jobs fresh indices.
    """
    search = Search(len(verdicts), jobs)
    calls: collections.Counter = collections.Counter()
    rounds = 0
    while not search.done:
        batch = search.next_batch()
        assert batch, "not done but nothing to probe"
        if rounds == 0:
            assert batch == [0, len(verdicts) - 1]
        else:
            assert 1 <= len(batch) <= max(jobs, 2)
        assert not set(batch) & set(calls), "re-probed a known index"
        rounds += 1
        for index in batch:
            calls[index] += 1
            search.record(index, verdicts[index])
    assert search.next_batch() == []
    return search.result(), rounds, calls


def ceil_log(base: int, n: int) -> int:
    """Smallest t with base**t >= n (exact integer arithmetic)."""
    t, power = 0, 1
    while power < n:
        power *= base
        t += 1
    return t


def monotone(n: int, boundary: int, skips: set[int] = frozenset()) -> list[Verdict]:
    """GOOD below ``boundary``, BAD from it on, SKIP at ``skips``."""
    return [S if i in skips else (G if i < boundary else B) for i in range(n)]


def oracle(n: int, boundary: int, skips: set[int]) -> tuple[Outcome, int | None, int | None, tuple[int, ...]]:
    """Expected (outcome, first_bad, last_good, ambiguous) for a monotone list, 1 <= boundary <= n-1.

    Written independently of the implementation: the last decidable index below the
    boundary and the first decidable one at or above it bracket the answer.
    """
    below = [i for i in range(boundary) if i not in skips]
    above = [i for i in range(boundary, n) if i not in skips]
    if not below and not above:
        return Outcome.UNDECIDED, None, None, tuple(range(n))
    if not below:
        return Outcome.UNDECIDED, above[0], None, tuple(range(above[0] + 1))
    if not above:
        return Outcome.UNDECIDED, None, below[-1], tuple(range(below[-1] + 1, n))
    lo, hi = below[-1], above[0]
    if hi == lo + 1:
        return Outcome.FOUND, hi, lo, ()
    return Outcome.UNDECIDED, hi, lo, tuple(range(lo + 1, hi + 1))


# -- table tests ---------------------------------------------------------------------------

TABLE = [
    # pattern, outcome, first_bad, last_good, ambiguous
    ("gb", Outcome.FOUND, 1, 0, ()),
    ("bb", Outcome.PREDATES_RANGE, 0, None, ()),
    ("gg", Outcome.NO_REGRESSION, None, 1, ()),
    ("bg", Outcome.PREDATES_RANGE, 0, None, ()),
    ("sb", Outcome.UNDECIDED, 1, None, (0, 1)),
    ("gs", Outcome.UNDECIDED, None, 0, (1,)),
    ("ss", Outcome.UNDECIDED, None, None, (0, 1)),
    ("gbb", Outcome.FOUND, 1, 0, ()),
    ("ggb", Outcome.FOUND, 2, 1, ()),
    ("gsb", Outcome.UNDECIDED, 2, 0, (1, 2)),
    ("sgb", Outcome.FOUND, 2, 1, ()),
    ("gbs", Outcome.FOUND, 1, 0, ()),
    ("bbbb", Outcome.PREDATES_RANGE, 0, None, ()),
    ("gggg", Outcome.NO_REGRESSION, None, 3, ()),
    ("ssss", Outcome.UNDECIDED, None, None, (0, 1, 2, 3)),
    ("sgbb", Outcome.FOUND, 2, 1, ()),
    ("ssbb", Outcome.UNDECIDED, 2, None, (0, 1, 2)),
    ("ggss", Outcome.UNDECIDED, None, 1, (2, 3)),
    ("ggggggbbbb", Outcome.FOUND, 6, 5, ()),
    ("gbbbbbbbbb", Outcome.FOUND, 1, 0, ()),
    ("gggggggggb", Outcome.FOUND, 9, 8, ()),
    ("gsssb", Outcome.UNDECIDED, 4, 0, (1, 2, 3, 4)),
    ("gggsbbb", Outcome.UNDECIDED, 4, 2, (3, 4)),
    ("gggssbb", Outcome.UNDECIDED, 5, 2, (3, 4, 5)),
    ("gggbsbb", Outcome.FOUND, 3, 2, ()),
    ("ggsgbbb", Outcome.FOUND, 4, 3, ()),
    ("gsgsgsgbsbsb", Outcome.FOUND, 7, 6, ()),
    ("sssgggbbbsss", Outcome.FOUND, 6, 5, ()),
    ("sssbbbbbbbbb", Outcome.UNDECIDED, 3, None, (0, 1, 2, 3)),
    ("gggggggggsss", Outcome.UNDECIDED, None, 8, (9, 10, 11)),
    ("g" + "s" * 30 + "b", Outcome.UNDECIDED, 31, 0, tuple(range(1, 32))),
]


@pytest.mark.parametrize("jobs", [1, 2, 3, 4])
@pytest.mark.parametrize("pattern, outcome, first_bad, last_good, ambiguous", TABLE)
def test_table(pattern, outcome, first_bad, last_good, ambiguous, jobs):
    result, rounds, calls = drive(parse(pattern), jobs)
    assert (result.outcome, result.first_bad, result.last_good, result.ambiguous) == (
        outcome, first_bad, last_good, ambiguous)
    assert sorted(result.probed) == sorted(calls)
    assert max(calls.values()) == 1
    assert result.reason and "\n" not in result.reason
    n = len(pattern)
    if "s" not in pattern:
        assert rounds <= ceil_log(jobs + 1, n) + 2
        if jobs == 1:
            assert len(calls) <= ceil_log(2, n) + 2


@pytest.mark.parametrize("pattern", ["bbbb", "gggg", "bggb", "gbbg"])
@pytest.mark.parametrize("jobs", [1, 3])
def test_endpoint_verdicts_end_search_after_one_round(pattern, jobs):
    result, rounds, _ = drive(parse(pattern), jobs)
    assert rounds == 1
    assert result.probed == (0, 3)


def test_least_satisfying_matches_manual_drive():
    for pattern, *_ in TABLE:
        for jobs in (1, 2, 3):
            verdicts = parse(pattern)
            assert least_satisfying(len(verdicts), verdicts.__getitem__, jobs) == drive(verdicts, jobs)[0]


def test_reason_names_labels_and_counts():
    verdicts = parse("gsssb")
    search = Search(5, labels=["0.20.1", "a", "b", "c", "0.22.0"])
    while not search.done:
        for i in search.next_batch():
            search.record(i, verdicts[i])
    assert search.result().reason.startswith("all 3 candidates between 0.20.1 and 0.22.0 were skipped")


def test_skipped_midpoint_steps_around_alternately():
    # 0..14 good, 15..20 bad; the midpoint 10 and its upper neighbour 11 are skipped.
    verdicts = monotone(21, 15, {10, 11})
    result, _, _ = drive(verdicts, 1)
    assert result.probed[:5] == (0, 20, 10, 11, 9)
    assert (result.outcome, result.first_bad) == (Outcome.FOUND, 15)


def test_skip_around_midpoint_is_not_a_linear_scan():
    # A long run of skips right above the midpoint: probes must jump below it instead.
    verdicts = monotone(101, 30, set(range(50, 90)))
    result, _, calls = drive(verdicts, 1)
    assert (result.outcome, result.first_bad) == (Outcome.FOUND, 30)
    assert len(calls) < 25


# -- non-monotone evidence --------------------------------------------------------------------

def test_non_monotone_keeps_tightest_bracket_and_says_so():
    search = Search(10)
    assert search.next_batch() == [0, 9]
    for index, verdict in [(0, G), (9, B), (3, B), (6, G)]:
        search.record(index, verdict)
    pattern = parse("ggbbbbgbbb")
    while not search.done:
        for i in search.next_batch():
            search.record(i, pattern[i])
    result = search.result()
    assert (result.outcome, result.first_bad, result.last_good) == (Outcome.FOUND, 2, 1)
    assert "not monotone" in result.reason


def test_reversed_endpoints_predate_and_say_so():
    result, _, _ = drive(parse("bggg"), 1)
    assert result.outcome is Outcome.PREDATES_RANGE
    assert "not monotone" in result.reason


def test_monotone_result_has_no_non_monotone_note():
    assert "not monotone" not in drive(parse("ggggbbbb"), 3)[0].reason


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([G, B, S]), min_size=2, max_size=60), st.integers(1, 4))
def test_arbitrary_verdicts_give_a_consistent_answer(verdicts, jobs):
    result, _, calls = drive(verdicts, jobs)
    assert max(calls.values()) == 1
    fb, lg, amb = result.first_bad, result.last_good, result.ambiguous
    if result.outcome is Outcome.PREDATES_RANGE:
        assert verdicts[0] is B and fb == 0
    elif result.outcome is Outcome.NO_REGRESSION:
        assert verdicts[-1] is G and lg == len(verdicts) - 1
    elif result.outcome is Outcome.FOUND:
        assert verdicts[fb] is B and verdicts[lg] is G and lg == fb - 1 and amb == ()
    else:
        assert amb == tuple(sorted(amb)) and amb
        assert fb is None or (verdicts[fb] is B and amb[-1] == fb)
        assert lg is None or (verdicts[lg] is G and amb[0] == lg + 1)
        assert all(verdicts[i] is S for i in amb if i != fb)


# -- memoisation and contract -----------------------------------------------------------------

@pytest.mark.parametrize("pattern", ["ggggggbbbb", "gsgsgsgbsbsb", "sssbbbbbbbbb", "g" + "s" * 30 + "b"])
@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_predicate_called_at_most_once_per_index(pattern, jobs):
    verdicts = parse(pattern)
    calls = collections.Counter()

    def predicate(i):
        calls[i] += 1
        return verdicts[i]

    result = least_satisfying(len(verdicts), predicate, jobs)
    assert max(calls.values()) == 1
    assert list(result.probed) == list(calls)  # in the order requested


def test_recording_a_conflicting_verdict_raises():
    search = Search(10)
    search.next_batch()
    search.record(0, G)
    search.record(0, G)  # same verdict again: fine
    with pytest.raises(ValueError):
        search.record(0, B)
    with pytest.raises(ValueError):
        search.record(0, S)


@pytest.mark.parametrize("bad", [-1, 10])
def test_recording_out_of_range_raises(bad):
    with pytest.raises(ValueError):
        Search(10).record(bad, G)


def test_recording_a_non_verdict_raises():
    with pytest.raises(TypeError):
        Search(10).record(3, "good")


@pytest.mark.parametrize("n", [-1, 0, 1])
def test_too_few_candidates_raise(n):
    with pytest.raises(ValueError):
        Search(n)
    with pytest.raises(ValueError):
        least_satisfying(n, lambda i: G)


def test_jobs_below_one_raises():
    with pytest.raises(ValueError):
        Search(10, jobs=0)


def test_result_before_done_raises_and_pending_is_not_reissued():
    search = Search(10, jobs=3)
    assert not search.done
    with pytest.raises(RuntimeError):
        search.result()
    assert search.next_batch() == [0, 9]
    assert search.next_batch() == []  # both endpoints still pending
    assert not search.done
    search.record(0, G)
    search.record(9, B)
    batch = search.next_batch()
    assert len(batch) == 3 and all(0 < i < 9 for i in batch)


def test_unrequested_record_is_used_and_listed():
    search = Search(10)
    search.record(4, G)  # e.g. from a cache
    search.next_batch()
    search.record(0, G)
    search.record(9, B)
    assert search.next_batch() == [6]  # bisects (4, 9), not (0, 9)
    search.record(6, B)
    assert search.next_batch() == [5]
    search.record(5, B)
    result = search.result()
    assert (result.outcome, result.first_bad, result.last_good) == (Outcome.FOUND, 5, 4)
    assert result.probed == (4, 0, 9, 6, 5)


# -- speculative prefetching --------------------------------------------------------------------

def test_speculative_covers_both_outcomes_of_the_pending_probe():
    search = Search(100)
    search.next_batch()
    search.record(0, G)
    search.record(99, B)
    (mid,) = search.next_batch()
    spec = search.speculative(2)
    assert len(spec) == 2 and mid not in spec
    for verdict in (G, B):
        branch = Search(100)
        branch.next_batch()
        branch.record(0, G)
        branch.record(99, B)
        assert branch.next_batch() == [mid]
        branch.record(mid, verdict)
        assert branch.next_batch()[0] in spec


def test_speculative_during_endpoints_predicts_the_first_bisection_batch():
    search = Search(1000, jobs=3)
    search.next_batch()
    spec = search.speculative(3)
    search.record(0, G)
    search.record(999, B)
    assert sorted(spec) == search.next_batch()


@pytest.mark.parametrize("limit", [0, 1, 5, 50])
def test_speculative_respects_limit_and_excludes_known_and_pending(limit):
    search = Search(500, jobs=4)
    pattern = monotone(500, 321, {250, 251})
    known = set()
    for _ in range(2):
        for i in search.next_batch():
            search.record(i, pattern[i])
            known.add(i)
    pending = search.next_batch()
    spec = search.speculative(limit)
    assert len(spec) <= limit and len(set(spec)) == len(spec)
    assert not set(spec) & (set(pending) | known)
    if limit:
        assert spec


def test_speculative_is_empty_when_done():
    search = Search(2)
    for i in search.next_batch():
        search.record(i, [G, B][i])
    assert search.done and search.speculative(5) == []


# -- jobs equivalence and properties ------------------------------------------------------------

def _random_lists(count: int, seed: int = 7):
    rng = random.Random(seed)
    for _ in range(count):
        n = rng.randint(2, 300)
        boundary = rng.randint(0, n)
        skips = {i for i in range(n) if rng.random() < rng.choice([0, 0.1, 0.5, 0.9])}
        yield monotone(n, boundary, skips)


def test_jobs_do_not_change_the_answer():
    for verdicts in _random_lists(150):
        answers = set()
        for jobs in (1, 2, 3, 4):
            r = drive(verdicts, jobs)[0]
            answers.add((r.outcome, r.first_bad, r.last_good, r.ambiguous))
        assert len(answers) == 1, verdicts


@st.composite
def bisection_cases(draw, endpoints_may_skip: bool):
    n = draw(st.integers(2, 2000))
    boundary = draw(st.integers(1, n - 1))
    low, high = (0, n - 1) if endpoints_may_skip else (1, n - 2)
    scattered = draw(st.sets(st.integers(0, n - 1), max_size=50))
    before = draw(st.integers(0, 20))
    after = draw(st.integers(0, 20))
    run = set(range(boundary - before, boundary + after))  # skips hugging the boundary
    skips = {i for i in scattered | run if low <= i <= high}
    return n, boundary, skips


def _check_bisection(n, boundary, skips, jobs):
    result, _, calls = drive(monotone(n, boundary, skips), jobs)
    assert max(calls.values()) == 1
    if result.outcome is Outcome.FOUND:
        assert result.first_bad == boundary and result.last_good == boundary - 1
    else:
        assert result.outcome is Outcome.UNDECIDED and boundary in result.ambiguous
    assert (result.outcome, result.first_bad, result.last_good, result.ambiguous) == oracle(n, boundary, skips)


@settings(max_examples=120, deadline=None)
@given(bisection_cases(endpoints_may_skip=False), st.integers(1, 4))
def test_boundary_found_or_ambiguous_inner_skips(case, jobs):
    _check_bisection(*case, jobs)


@settings(max_examples=80, deadline=None)
@given(bisection_cases(endpoints_may_skip=True), st.integers(1, 4))
def test_boundary_found_or_ambiguous_endpoint_skips(case, jobs):
    _check_bisection(*case, jobs)


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 2000), st.data())
def test_probe_bound_without_skips(n, data):
    boundary = data.draw(st.integers(0, n))  # 0: predates, n: no regression
    result, _, calls = drive(monotone(n, boundary), 1)
    assert len(calls) <= ceil_log(2, n) + 2
    if 1 <= boundary <= n - 1:
        assert (result.outcome, result.first_bad) == (Outcome.FOUND, boundary)


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 2000), st.integers(1, 8), st.data())
def test_round_bound_without_skips(n, jobs, data):
    boundary = data.draw(st.integers(1, n - 1))
    result, rounds, _ = drive(monotone(n, boundary), jobs)
    assert rounds <= ceil_log(jobs + 1, n) + 2
    assert (result.outcome, result.first_bad, result.last_good) == (Outcome.FOUND, boundary, boundary - 1)
