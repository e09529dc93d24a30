"""A search phase in stats mode: the endpoints' round first (it may already answer), then the search
with every candidate judged by :class:`~bisector.decide.paired.PairedJudge`."""
from __future__ import annotations

from typing import Optional

from bisector.decide.judge import Judgement
from bisector.decide.paired import PairedJudge
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

    def _confirm(self, out: PhaseResult) -> bool:
        """The boundary pair measured again, fresh and interleaved, and compared with each other (the
        claim itself: the step is between them), not each with the good endpoint again. The last good
        candidate's fresh repeats start after its search samples (the good endpoint's in slot ``n``)."""
        n, rep = len(self.candidates), self.criterion.max_repeats
        last_good, first_bad = out.search.last_good, out.search.first_bad
        good_first = n * rep if last_good == 0 else rep
        j = self.paired.confirm_step(self.candidates[last_good], good_first, self.candidates[first_bad], rep)
        self.on_step(self.name + ":confirm", self.candidates[first_bad], j)
        return j.verdict is Verdict.BAD

    def _judge(self, index: int, calibrated: Calibrated, first_repeat: int = 0) -> Judgement:
        n = len(self.candidates)
        if index == 0:
            return self._ends[0]
        if index == n - 1:
            return self._ends[1]
        return self.paired.judge(self.candidates[index], index, first_repeat)
