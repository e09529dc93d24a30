"""A search phase in stats mode: the endpoints' round first (it may already answer), then the search
with every candidate judged by :class:`~bisector.bisection.paired.PairedJudge`."""
from __future__ import annotations

from typing import Optional

from bisector.bisection.judge import Judgement
from bisector.bisection.paired import PairedJudge
from bisector.bisection.phase import Phase, PhaseResult
from bisector.core.criterion import Calibrated, calibrate
from bisector.core.search import Outcome, SearchResult
from bisector.core.verdict import Verdict


class StatsPhase(Phase):
    """:class:`Phase` with ``compare = "stats"``: the good endpoint is the reference (GOOD by definition),
    the bad endpoint is judged against it in an interleaved round before the search starts."""

    paired: PairedJudge
    _ends: tuple[Judgement, Judgement]

    def _calibrate(self) -> Calibrated:
        first, last = self.candidates[0], self.candidates[-1]
        self.paired = PairedJudge(self.measurer, self.criterion, first, last, len(self.candidates))
        self._ends = self.paired.endpoints()
        return calibrate(self.criterion)

    def _early_result(self, calibrated: Calibrated) -> Optional[PhaseResult]:
        """The endpoints still UNKNOWN after ``max_repeats``: undecided, without a search."""
        good, bad = self._ends
        if bad.verdict is not Verdict.SKIP:
            return None
        n = len(self.candidates)
        for c, j in ((self.candidates[0], good), (self.candidates[-1], bad)):
            self.on_step(self.name, c, j)
        search = SearchResult(Outcome.UNDECIDED, None, 0, tuple(range(1, n)), (0, n - 1),
                              f"the bad endpoint {self.candidates[-1].short} could not be told apart from the good "
                              f"one: {bad.reason}")
        return PhaseResult(self.candidates, search, calibrated, {0: good, n - 1: bad})

    def _batch_started(self, batch: list[int]) -> None:
        self.paired.pool_finished()

    def _judge(self, index: int, calibrated: Calibrated, first_repeat: int = 0) -> Judgement:
        n = len(self.candidates)
        if index == 0:
            return self._ends[0]
        if index == n - 1 and first_repeat == 0:
            return self._ends[1]
        if first_repeat:   # a confirmation, after the search: every candidate's good samples are pooled
            self.paired.pool_finished()
        return self.paired.judge(self.candidates[index], index + (n if first_repeat else 0), first_repeat)
