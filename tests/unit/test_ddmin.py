"""The pure ddmin core (bisector.core.ddmin): tables of exact trial sequences, and properties over
random change sets (minimality, one test per subset, the documented bounds)."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bisector.core.ddmin import Trial, ddmin, single_bound, split, worst_bound

F, S, U = Trial.FLIPS, Trial.STAYS, Trial.UNRESOLVED


def needs(*groups: set[int], unresolved: frozenset[frozenset[int]] = frozenset()):
    """A monotone test: a subset flips when it holds every change of any one group."""
    def test(subset: frozenset[int]) -> Trial:
        if subset in unresolved:
            return U
        return F if any(g <= subset for g in groups) else S
    return test


def sets(result) -> list[tuple[list[int], Trial]]:
    return [(sorted(s), t) for s, t in result.tested]


@pytest.mark.parametrize("n, groups, minimal, tested", [
    (2, [{1}], (1,), [([0], S), ([1], F)]),
    (2, [{0}], (0,), [([0], F)]),
    (3, [{1}], (1,), [([0], S), ([1, 2], F), ([1], F)]),
    (5, [{4}], (4,), [([0, 1], S), ([2, 3, 4], F), ([2], S), ([3, 4], F), ([3], S), ([4], F)]),
    # two changes that only flip together: every part stays, a complement flips
    (3, [{1, 2}], (1, 2), [([0], S), ([1, 2], F), ([1], S), ([2], S)]),
    (4, [{0, 3}], (0, 3), None),
])
def test_trial_tables(n, groups, minimal, tested):
    result = ddmin(n, needs(*groups))
    assert result.minimal == minimal
    if tested is not None:
        assert sets(result) == tested


def test_two_far_apart_changes_that_only_flip_together():
    result = ddmin(4, needs({0, 3}))
    assert result.minimal == (0, 3)
    assert len({s for s, _ in result.tested}) == result.trials      # no subset tested twice


def test_known_answers_are_not_tested_again():
    asked = []

    def test(subset):
        asked.append(subset)
        return needs({2})(subset)

    result = ddmin(4, test, known={frozenset({0, 1}): S})
    assert result.minimal == (2,)
    assert frozenset({0, 1}) not in asked and asked[0] == frozenset({2, 3})


def test_an_unresolved_part_is_no_evidence():
    """The flipping half cannot be judged: ddmin goes to finer parts and still finds the change."""
    result = ddmin(4, needs({3}, unresolved=frozenset({frozenset({2, 3})})))
    assert result.minimal == (3,)
    assert (frozenset({2, 3}), U) in result.tested


def test_everything_unresolved_leaves_the_whole_set():
    result = ddmin(5, lambda subset: U)
    assert result.minimal == (0, 1, 2, 3, 4) and result.trials <= worst_bound(5)


def test_one_change_is_its_own_answer_without_a_test():
    assert ddmin(1, lambda s: pytest.fail("no test needed")).minimal == (0,)


def test_split_keeps_order_and_sizes():
    assert split([0, 1, 2, 3, 4], 2) == [[0, 1], [2, 3, 4]]
    assert split([0, 1, 2], 5) == [[0], [1], [2]]
    assert [len(p) for p in split(list(range(10)), 3)] == [3, 3, 4]


@pytest.mark.parametrize("n", [2, 3, 5, 6, 8, 13, 40, 64])
def test_single_change_bound_holds_at_every_position(n):
    """The documented bound for one change that matters: 2 * ceil(log2 n) trials (6 for 6, 12 for 40)."""
    for culprit in range(n):
        result = ddmin(n, needs({culprit}))
        assert result.minimal == (culprit,)
        assert result.trials <= single_bound(n)
    assert single_bound(6) == 6 and single_bound(40) == 12


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=10).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.sets(st.integers(0, n - 1), min_size=1), min_size=1, max_size=3))))
def test_monotone_tests_give_a_one_minimal_flipping_set(case):
    n, groups = case
    test = needs(*groups)
    result = ddmin(n, test)
    minimal = frozenset(result.minimal)
    assert test(minimal) is F
    for change in minimal:
        assert test(minimal - {change}) is not F
    subsets = [s for s, _ in result.tested]
    assert len(subsets) == len(set(subsets)) and result.trials <= worst_bound(n)
    assert frozenset(range(n)) not in subsets and frozenset() not in subsets


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=8), st.randoms(use_true_random=False))
def test_any_test_answers_stay_within_the_worst_bound(n, rnd):
    """Non-monotone, noisy answers: still a flipping (or the whole) set, each subset tested once."""
    answers = {}

    def test(subset):
        return answers.setdefault(subset, rnd.choice([F, S, U]))

    result = ddmin(n, test)
    minimal = frozenset(result.minimal)
    assert minimal == frozenset(range(n)) or answers[minimal] is F
    assert result.trials == len(answers) <= worst_bound(n)


def test_exhaustive_pairs_of_changes_in_six():
    for pair in itertools.combinations(range(6), 2):
        result = ddmin(6, needs(set(pair)))
        assert result.minimal == pair and result.trials <= worst_bound(6)
