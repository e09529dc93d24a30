"""--widen: when the good endpoint is already BAD, find an older GOOD release in growing steps."""
from __future__ import annotations

from typing import Callable, Optional

from bisector.bisection.judge import Judgement
from bisector.core.candidate import Candidate
from bisector.core.verdict import Verdict

MAX_SKIPS = 2


def walk_back(older: list[Candidate], judge: Callable[[Candidate], Judgement],
              on_step: Callable[[Candidate, Judgement], None], note: Callable[[str], None]) -> Optional[Candidate]:
    """Judge older releases 1, 2, 4, 8 ... steps back from the newest; the first GOOD one wins.

    Stops (returning None, with a note) when releases run out or ``MAX_SKIPS`` in a row cannot
    be measured, which is where compatibility with the environment ends.
    """
    if not older:
        note("--widen: there is no older release to try")
        return None
    index, step, skips = len(older) - 1, 1, 0
    tried: set[int] = set()
    while index not in tried:
        tried.add(index)
        c = older[index]
        j = judge(c)
        on_step(c, j)
        if j.verdict is Verdict.GOOD:
            return c
        skips = skips + 1 if j.verdict is Verdict.SKIP else 0
        if skips >= MAX_SKIPS:
            note(f"--widen: compatibility ends around {c.ref} ({j.reason}); no older GOOD release found")
            return None
        index, step = max(0, index - step), step * 2
    note(f"--widen: every release back to {older[0].ref} is BAD; the change is older than the package's "
         "measurable history")
    return None
