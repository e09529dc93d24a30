"""One search phase over a candidate list: endpoints, calibration, k-way search, confirmation."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Optional

from bisector.decide.judge import Judgement, judge, missing_why, refuse_bad_input
from bisector.decide.seam import Measures
from bisector.core.candidate import Candidate
from bisector.core.criterion import (AUTO_CHANGE_SPREADS, FAILS_RULE, FAILURES, Calibrated, Criterion, calibrate,
                                    change_tolerance, needs_endpoints)
from bisector.core.failure_rule import fails, program_fails
from bisector.core.default_rule import chosen_rule
from bisector.core.measurement import Measurement, metric_value, metric_values
from bisector.core.units import human_value
from bisector.core.search import Outcome, Search, SearchResult
from bisector.core.verdict import Verdict
from bisector.errors import UndecidedError, UsageError

_FLIP = {Verdict.GOOD: Verdict.BAD, Verdict.BAD: Verdict.GOOD, Verdict.SKIP: Verdict.SKIP}


def _unmeasured(j: Judgement) -> bool:
    """A SKIP that no probe value stands behind: the setting failed, not the comparison."""
    return j.verdict is Verdict.SKIP and j.value is None


def inside_spread(calibrated: Calibrated, ends: list[tuple[str, list[float]]]) -> Optional[str]:
    """One line when the threshold lies inside the spread of an endpoint's own repeats (a noisy metric:
    verdicts near it are noise), offering stats mode; None otherwise."""
    c, threshold = calibrated.criterion, calibrated.threshold
    if threshold is None:
        return None
    for label, values in ends:
        if len(values) >= 2 and min(values) <= threshold <= max(values):
            return (f"the threshold {human_value(threshold, c.metric)} lies inside the spread of {label}'s own "
                    f"{len(values)} repeats of {c.metric} ({human_value(min(values), c.metric)} .. "
                    f"{human_value(max(values), c.metric)}): a verdict near it is noise; --compare stats judges "
                    "each candidate by its samples")
    return None


def flipped(verdict: Verdict) -> Verdict:
    """The verdict as --find-fix reads it (GOOD and BAD swapped, SKIP kept)."""
    return _FLIP[verdict]


@dataclass
class PhaseResult:
    """The search result over one candidate list, with every judgement made."""

    candidates: list[Candidate]
    search: SearchResult
    calibrated: Calibrated
    judgements: dict[int, Judgement] = field(default_factory=dict)
    confirmed: Optional[bool] = None


class Phase:
    """Runs a search over ``candidates`` (oldest first) and reports each judgement to ``on_step``."""

    def __init__(self, name: str, candidates: list[Candidate], measurer: Measures, criterion: Criterion,
                 on_step: Callable[[str, Candidate, Judgement], None], jobs: int = 1,
                 prefetch: bool = True, find_fix: bool = False, confirm: bool = True, slots: int = 0,
                 on_note: Optional[Callable[[str], None]] = None):
        self.name, self.candidates, self.measurer, self.criterion = name, candidates, measurer, criterion
        self.on_note = on_note
        self.on_step, self.jobs, self.prefetch = on_step, jobs, prefetch
        self.find_fix, self.confirm = find_fix, confirm
        self.slots = slots  # > 0: the measurer speculates, with this many measurements at once

    def _calibrate(self) -> Calibrated:
        if not needs_endpoints(self.criterion):
            return calibrate(self.criterion)
        ends = [self.candidates[0], self.candidates[-1]]
        with ThreadPoolExecutor(max_workers=min(2, self.jobs)) as pool:
            runs = list(pool.map(lambda c: [self.measurer.measure(c, r) for r in range(self.criterion.repeats)], ends))
        values = [metric_value(ms, self.criterion.metric) for ms in runs]
        if None in values:
            refuse_bad_input(self.measurer.bad_input, [m for ms in runs for m in ms])   # e.g. --measure-skip too high
        # the good endpoint is the one a relative rule is measured from: the older, or with --find-fix the newer
        # (the fixed one: the verdicts are flipped, so the criterion's GOOD side is where the fix landed)
        good, bad = (1, 0) if self.find_fix else (0, 1)
        if values[good] is not None and values[bad] is None and fails(runs[bad]) and chosen_rule(self.criterion):
            return self._program_fails(ends[bad], runs[bad])
        if values[good] is None:
            why = missing_why(runs[good], self.criterion.metric)
            if values[bad] is None:
                other = missing_why(runs[bad], self.criterion.metric)
                raise UndecidedError("cannot measure either endpoint: " + (why if other == why else
                                     f"{ends[good].short}: {why}; {ends[bad].short}: {other}"))
            raise UndecidedError(f"the good endpoint {ends[good].short} gave no {self.criterion.metric}: {why}")
        spread = self._repeats_of_good(ends[good], len(runs[good]), values[good]) if self.criterion.two_sided else None
        calibrated = calibrate(self.criterion, values[good], values[bad], spread)
        said = inside_spread(calibrated, [(c.short, metric_values(ms, self.criterion.metric)) for c, ms in zip(ends, runs)])
        if said and self.on_note:
            self.on_note(said)
        return calibrated

    def _repeats_of_good(self, end: Candidate, taken: int, value: float) -> float:
        """A two-sided rule measures the good end once more before anything is bisected: a program that does not
        repeat within the tolerance is refused in one line (noise is not a change), and ``--max-change auto`` takes
        its tolerance from the spread. Returns the spread."""
        c, metric = self.criterion, self.criterion.metric
        again = [self.measurer.measure(end, taken)]
        second = metric_value(again, metric)
        if second is None:
            raise UndecidedError(f"the good endpoint {end.short} gave no {metric} when measured again: "
                                 f"{missing_why(again, metric)}")
        spread = abs(second - value)
        if c.max_change == "auto":
            said = (f"the good end {end.short} repeats exactly ({metric} {value!r} twice): any change counts" if
                    spread == 0 else f"the good end {end.short}'s two runs differ by {spread:.6g}: a change beyond "
                    f"{change_tolerance(c, value, spread):.6g} counts ({AUTO_CHANGE_SPREADS}x that spread)")
            if self.on_note:
                self.on_note(f"{said} (--max-change auto)")
            return spread
        tolerance = change_tolerance(c, value)
        if spread > tolerance:
            raise UsageError(f"the good end {end.short} does not repeat: {metric} {value!r} then {second!r} "
                             f"({spread:.6g} apart, beyond the tolerance {tolerance:.6g}): the program is not "
                             "deterministic and noise is not a change; --compare stats judges by samples")
        return spread

    def _program_fails(self, end: Candidate, runs: list[Measurement]) -> Calibrated:
        """The good end measured, the bad end failed, and the job gave no rule: where does the program start to
        fail? The criterion becomes the failure itself (crash BAD, success GOOD), and the note says why."""
        failed = next(m for m in reversed(runs) if m.status in FAILURES)
        self.criterion = program_fails(self.criterion)
        if self.on_note:
            self.on_note(f"the bad end {end.short} fails ({failed.status.value}: {failed.reason or 'no reason given'}) "
                         f"and no rule was given: bisecting where the program starts to fail ({FAILS_RULE})")
        return calibrate(self.criterion)

    def _judge(self, index: int, calibrated: Calibrated, first_repeat: int = 0) -> Judgement:
        j = judge(self.measurer, calibrated, self.candidates[index], first_repeat)
        if self.find_fix:
            j.verdict = _FLIP[j.verdict]
        return j

    def _early_result(self, calibrated: Calibrated) -> Optional[PhaseResult]:
        """A result the endpoints decide before any search (none here; stats mode's can)."""
        return None

    def _batch_started(self, batch: list[int]) -> None:
        """Called before each batch is judged (stats mode pools the good endpoint's samples here)."""

    def run(self) -> PhaseResult:
        """Calibrate, search, and re-measure the boundary pair when ``confirm``."""
        calibrated = self._calibrate()
        early = self._early_result(calibrated)
        if early is not None:
            return early
        search = Search(len(self.candidates), jobs=self.jobs, labels=[c.short for c in self.candidates])
        out = PhaseResult(self.candidates, None, calibrated)  # type: ignore[arg-type]
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            while batch := search.next_batch():
                self._batch_started(batch)
                if self.prefetch:
                    self.measurer.prefetch([self.candidates[i] for i in self._ahead(search, batch)])
                self._speculate(search, batch)
                self.measurer.warm([(self.candidates[i], 0) for i in batch])  # e.g. both endpoints' workers at once
                for index, j in zip(batch, pool.map(lambda i: self._judge(i, calibrated), batch)):
                    out.judgements[index] = j
                    search.record(index, j.verdict)
                    self.on_step(self.name, self.candidates[index], j)
                self._stop_when_unmeasurable(out)
        self._speculate(search, [])  # the answer is known: what is still speculative no longer matters
        if self.prefetch:
            self.measurer.prefetch([])  # nor are the builds still queued for it
        out.search = search.result()
        if self.confirm and out.search.outcome is Outcome.FOUND:
            out.confirmed = self._confirm(out)
        return out

    def _end_judgements(self, out: PhaseResult) -> list[Optional[Judgement]]:
        return [out.judgements.get(0), out.judgements.get(len(self.candidates) - 1)]

    def _ahead(self, search: Search, batch: list[int]) -> list[int]:
        """What to build while ``batch`` is judged: its members waiting for one of the ``jobs`` slots,
        then both next midpoints and one after, unless the batch holds an endpoint not yet judged: the
        endpoints alone may end the run (the regression predates the range, or there is none), so
        nothing inside the range is built before their verdicts are known."""
        waiting = batch[self.jobs:]
        ends = {0, len(self.candidates) - 1}
        if ends & set(batch):
            return waiting
        return waiting + [i for i in search.speculative(2 * self.jobs + 1) if i not in waiting]

    def _stop_when_unmeasurable(self, out: PhaseResult) -> None:
        """Both endpoints measured nothing (a broken setting, not a regression): the inner candidates would
        not do better, so the answer is this one line, before they are built."""
        ends = self._end_judgements(out)
        if all(j is not None and _unmeasured(j) for j in ends):
            reasons = list(dict.fromkeys(j.reason for j in ends))
            raise UndecidedError("cannot measure either endpoint: " + (reasons[0] if len(reasons) == 1 else
                                 f"{self.candidates[0].short}: {reasons[0]}; {self.candidates[-1].short}: {reasons[1]}"))

    def _speculate(self, search: Search, batch: list[int]) -> None:
        """Spare slots (beyond the ``jobs`` judged at once) measure what comes next: the batch's members
        still waiting for a judge, then the likely next midpoints; speculative measurements the round's
        answer made moot are cancelled (one that already returned is stored)."""
        if self.slots <= 0:
            return
        spare = self.slots - min(len(batch), self.jobs)
        likely = (batch[self.jobs:] + search.speculative(spare))[:spare] if batch and spare > 0 else []
        self.measurer.speculate([self.candidates[i] for i in batch], [self.candidates[i] for i in likely])

    def _confirm(self, out: PhaseResult) -> bool:
        """Re-measure the last-good / first-bad pair (new repeats) and check the verdicts hold."""
        pairs = [(out.search.last_good, Verdict.GOOD), (out.search.first_bad, Verdict.BAD)]
        ok = True
        for index, expected in pairs:
            j = self._judge(index, out.calibrated, first_repeat=self.criterion.max_repeats)
            self.on_step(self.name + ":confirm", self.candidates[index], j)
            ok = ok and j.verdict is expected
        return ok
