"""Pure delta debugging (Zeller and Hildebrandt's ddmin): the smallest set of changes that, applied to
one setup, moves it to the other side.

Changes are indices ``0..n-1``. A *test* applies a subset of them to the starting setup and says
whether the result landed on the other side (:attr:`Trial.FLIPS`), stayed (:attr:`Trial.STAYS`), or
could not be judged (:attr:`Trial.UNRESOLVED`, a SKIP: never evidence either way). Nothing here does
I/O: the caller's ``test`` measures. Preconditions, which the caller has measured: the empty set
stays (the starting setup itself) and the full set flips (the other setup).

The search keeps a flipping set ``c`` (at first all changes) and a granularity ``k``: it splits ``c``
into ``k`` parts, tests each part, then (for ``k > 2``) each part's complement; a flipping part or
complement becomes the new ``c``; when none flips, ``k`` doubles, and when ``c`` cannot be split
further the answer is ``c``. Every subset is tested at most once (answers are cached, and the
caller's known answers can be handed in as ``known``).

The answer is 1-minimal when the test is monotone (a superset of a flipping set flips): removing
any single change from it stays or is unresolved. Trials, by the shape of the changes:

* one change that matters among ``n``: at most ``2 * ceil(log2 n)`` tests (:func:`single_bound`);
  6 changes: at most 6; 40 changes: at most 12;
* in general at most ``n * n + 3 * n`` tests (Zeller's worst case), whatever the test says.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Optional


class Trial(enum.StrEnum):
    """What applying a subset of the changes did."""

    FLIPS = "flips"            # landed on the other side
    STAYS = "stays"            # stayed on the starting side
    UNRESOLVED = "unresolved"  # could not be judged (SKIP)


Subset = frozenset[int]


@dataclass(frozen=True)
class DDResult:
    """The answer: ``minimal`` (sorted indices) and every subset tested, in order, with its outcome
    (handed-in ``known`` answers are not listed unless the search asked for them)."""

    minimal: tuple[int, ...]
    tested: tuple[tuple[Subset, Trial], ...]

    @property
    def trials(self) -> int:
        """How many tests the search made (cached answers count once)."""
        return len(self.tested)


def single_bound(n: int) -> int:
    """The most tests ddmin makes when exactly one of ``n`` changes matters: 2 * ceil(log2 n)."""
    return 2 * math.ceil(math.log2(n)) if n > 1 else 0


def worst_bound(n: int) -> int:
    """The most tests ddmin makes for ``n`` changes, whatever the test answers."""
    return n * n + 3 * n


def split(items: list[int], parts: int) -> list[list[int]]:
    """``items`` cut into ``parts`` contiguous, nearly equal, non-empty pieces (order kept)."""
    parts = max(1, min(parts, len(items)))
    return [items[i * len(items) // parts:(i + 1) * len(items) // parts] for i in range(parts)]


@dataclass
class _Tester:
    test: Callable[[Subset], Trial]
    known: dict[Subset, Trial]
    tested: list[tuple[Subset, Trial]] = field(default_factory=list)

    def flips(self, subset: Iterable[int]) -> bool:
        key = frozenset(subset)
        if key not in self.known:
            self.known[key] = self.test(key)
            self.tested.append((key, self.known[key]))
        return self.known[key] is Trial.FLIPS


def _step(c: list[int], k: int, t: _Tester) -> tuple[list[int], int, bool]:
    """One round at granularity ``k``: (the new c, the new k, whether c shrank)."""
    parts = split(c, k)
    for part in parts:
        if t.flips(part):
            return part, 2, True
    if len(parts) > 2:
        for part in parts:
            rest = [i for i in c if i not in part]
            if t.flips(rest):
                return rest, max(len(parts) - 1, 2), True
    return c, min(len(c), 2 * len(parts)), False


def ddmin(n: int, test: Callable[[Subset], Trial], known: Optional[Mapping[Subset, Trial]] = None) -> DDResult:
    """The 1-minimal flipping subset of changes ``0..n-1`` (see the module for the rules)."""
    cache = {frozenset(range(n)): Trial.FLIPS, frozenset(): Trial.STAYS, **(known or {})}
    tester = _Tester(test, dict(cache))
    c, k = list(range(n)), 2
    while len(c) >= 2:
        c, k_next, shrank = _step(c, k, tester)
        if not shrank and k >= len(c):
            break
        k = k_next
    return DDResult(tuple(sorted(c)), tuple(tester.tested))
