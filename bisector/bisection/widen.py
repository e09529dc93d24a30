"""--widen: when the good endpoint is already BAD, find an older GOOD release in growing steps."""
from __future__ import annotations

from typing import Callable, Optional

from bisector.decide.judge import Judgement
from bisector.core.candidate import Candidate
from bisector.core.verdict import Verdict

MAX_SKIPS = 2


def _short(reason: str, limit: int = 160) -> str:
    return reason if len(reason) <= limit else reason[: limit - 1] + "…"


def _stopped(tried: list[tuple[Candidate, Judgement]], oldest: Candidate) -> str:
    """Where the walk stopped and why, from what it measured."""
    bad = [c for c, j in tried if j.verdict is Verdict.BAD]
    skipped = [(c, j) for c, j in tried if j.verdict is Verdict.SKIP]
    if not skipped or tried[-1][1].verdict is not Verdict.SKIP:
        return (f"--widen: every release measured back to {tried[-1][0].ref} is BAD (down to the oldest, "
                f"{oldest.ref}): the change is older than the package's measurable history")
    last_bad = f"the oldest release measured, {bad[-1].ref}, is BAD" if bad else "no older release was measured"
    cannot = "; ".join(f"{c.ref}: {_short(j.reason)}" for c, j in skipped[-MAX_SKIPS:])
    return (f"--widen: {last_bad}; compatibility ends around {skipped[-1][0].ref}, where releases cannot be "
            f"measured here ({cannot}): no older GOOD release found")


def walk_back(older: list[Candidate], judge: Callable[[Candidate], Judgement],
              on_step: Callable[[Candidate, Judgement], None], note: Callable[[str], None]) -> Optional[Candidate]:
    """Judge older releases 1, 2, 4, 8 ... steps back from the newest; the first GOOD one wins.

    Stops (returning None, with a note saying where and why) when releases run out or ``MAX_SKIPS``
    in a row cannot be measured, which is where compatibility with the environment ends.
    """
    if not older:
        note("--widen: there is no older release to try")
        return None
    index, step, skips, tried = len(older) - 1, 1, 0, []
    while not any(c is older[index] for c, _ in tried):
        c = older[index]
        j = judge(c)
        on_step(c, j)
        tried.append((c, j))
        if j.verdict is Verdict.GOOD:
            return c
        skips = skips + 1 if j.verdict is Verdict.SKIP else 0
        if skips >= MAX_SKIPS:
            break
        index, step = max(0, index - step), step * 2
    note(_stopped(tried, older[0]))
    return None
