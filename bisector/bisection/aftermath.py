"""What a found boundary gets before it is reported: the attribution of the step among what moved
(bisection.companion_trials), the bisect of the companion when it is the cause (returned as a
:class:`~bisector.bisection.follow_up.FollowUp` for the driver to run), and for a commit culprit
its confirmation by revert (bisection.revert). Every trial is a step of the run, recorded the moment it
is measured, so an interrupted run resumes with the missing ones only."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

from bisector.bisection.companion_trials import attribute
from bisector.bisection.follow_up import FollowUp, follow_command, follow_config, should_follow
from bisector.decide.judge import Judgement
from bisector.bisection.phase import PhaseResult
from bisector.bisection.plan import Plan
from bisector.bisection.recorder import RunRecorder
from bisector.bisection.revert import confirm_by_revert
from bisector.decide.seam import MeasurerFactory
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.changes import Attribution, AttributionKind
from bisector.core.result import BisectResult
from bisector.core.search import Outcome
from bisector.envs import CacheLayout


class Aftermath:
    """Attribution, follow and revert confirmation of one found phase (see the module)."""

    def __init__(self, recorder: RunRecorder, measurers: MeasurerFactory, plan: Plan, phase: PhaseResult,
                 cache_dir: Path):
        self.recorder, self.measurers, self.plan, self.phase = recorder, measurers, plan, phase
        self.config, self.cache_dir = recorder.config, cache_dir
        s = phase.search
        self.first_bad = phase.candidates[s.first_bad] if s.first_bad is not None else None
        self.last_good = phase.candidates[s.last_good] if s.last_good is not None else None

    def finish(self, result: BisectResult) -> tuple[BisectResult, Optional[FollowUp]]:
        """``result`` with its attribution and confirmation (when they apply), and the companion's
        bisect to run when the attribution names one and following is on."""
        if result.status is not Outcome.FOUND or self.first_bad is None or self.last_good is None:
            return result, None
        job, follow = self.config.job, None
        if job.attribute and result.also_changed:
            result.attribution = self._attribute(result)
            follow = self._follow_or_suggest(result)
        if job.confirm_revert and self.first_bad.kind is CandidateKind.COMMIT and self.plan.repo_path:
            result.confirmation = confirm_by_revert(self.plan.repo_path, self.first_bad, self.phase.candidates[-1],
                                                    self._judge_revert, CacheLayout(self.cache_dir).tmp)
        return result, follow

    def _attribute(self, result: BisectResult) -> Attribution:
        self.recorder.note(f"also changed: {', '.join(result.also_changed)}; measuring which change explains the "
                           "step")

        def judge_setup(label: str, c: Candidate, pins: dict[str, str]) -> Judgement:
            measurer = self.recorder.measurer(self.measurers.pinned(pins), self.plan.repo_path)
            return self.recorder.judged("attribution", measurer, c, self.phase.calibrated, label)[0]

        return attribute(self.config.job.package, self.last_good, self.first_bad, result.also_changed, judge_setup)

    def _judge_revert(self, c: Candidate) -> Judgement:
        measurer = self.recorder.measurer(self.measurers, self.plan.repo_path)
        return self.recorder.judged("revert", measurer, c, self.phase.calibrated)[0]

    def _follow_or_suggest(self, result: BisectResult) -> Optional[FollowUp]:
        """The companion's bisect to run (or the note saying how); the refine and widen hints follow
        the attribution."""
        a, note = result.attribution, self.recorder.note
        if a.kind is AttributionKind.INTERACTION:
            result.refine_command = None
            note("only a set of changes gives the step together (" + ", ".join(a.packages) + "); "
                 "bisect one of them with the others pinned at their first-bad versions")
        if a.kind is not AttributionKind.COMPANION:
            return None
        followed = follow_config(self.config, a, self.first_bad)
        if followed is None:
            result.refine_command = None
            note(f"the step comes with {a.minimal[0].describe()}; it cannot be followed from a commit candidate "
                 "or a package absent on one side: bisect it by hand")
            return None
        added = [p for p in followed.job.pins if p not in self.config.job.pins]
        command = follow_command(self.recorder.command, followed, added)
        result.refine_command, result.widen_command = shlex.join(command), None
        if not should_follow(self.config, a):
            note(f"the step comes with {a.minimal[0].describe()}; bisect it with: {shlex.join(command)}")
            return None
        note(f"following {a.minimal[0].describe()} (with {', '.join(added)})")
        pins = dict(p.split("==", 1) for p in added)
        return FollowUp(config=followed, measurers=self.measurers.pinned(pins), command=command)
