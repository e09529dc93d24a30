"""What a found boundary gets before it is reported: the attribution of the step among what moved
(bisection.companion_trials), the bisect of the companion when it is the cause (returned as a
:class:`~bisector.bisection.follow_up.FollowUp` for the driver to run), and for a commit culprit
its confirmation by revert (bisection.revert). Every trial is a step of the run, recorded the moment it
is measured, so an interrupted run resumes with the missing ones only."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bisector.job.commandline import joined
from bisector.bisection.companion_trials import attribute
from bisector.bisection.follow_up import FollowUp, follow_command, follow_config, should_follow
from bisector.decide.judge import Judgement
from bisector.bisection.phase import PhaseResult
from bisector.bisection.plan import Plan
from bisector.bisection.recorder import RunRecorder
from bisector.bisection.revert import confirm_by_revert
from bisector.decide.seam import MeasurerFactory
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.changes import Attribution, AttributionKind, Confirmation
from bisector.envs import CacheLayout


@dataclass(frozen=True)
class AftermathOutcome:
    """What a found boundary got: which change explains the step (``attribution``), a commit culprit's
    revert measured on the bad end (``confirmation``), and the companion's bisect, to run (``follow``) or
    offered as a command (``offered``); ``no_refine``: the step is no single candidate's (an interaction,
    or a companion that cannot be followed), so no refine hint is offered."""

    attribution: Optional[Attribution] = None
    confirmation: Optional[Confirmation] = None
    follow: Optional[FollowUp] = None
    offered: Optional[list[str]] = None
    no_refine: bool = False

    @property
    def attributed(self) -> bool:
        """The step is explained by something other than the candidate (refined by following that)."""
        return self.attribution is not None and self.attribution.kind is not AttributionKind.CANDIDATE


class Aftermath:
    """Attribution, follow and revert confirmation of one found phase (see the module)."""

    def __init__(self, recorder: RunRecorder, measurers: MeasurerFactory, plan: Plan, phase: PhaseResult,
                 cache_dir: Path):
        self.recorder, self.measurers, self.plan, self.phase = recorder, measurers, plan, phase
        self.config, self.cache_dir = recorder.config, cache_dir
        s = phase.search
        self.first_bad = phase.candidates[s.first_bad] if s.first_bad is not None else None
        self.last_good = phase.candidates[s.last_good] if s.last_good is not None else None

    def outcome(self, found: bool, also_changed: dict[str, list[str]]) -> AftermathOutcome:
        """What the boundary gets when the phase ``found`` it: the attribution among ``also_changed`` (the
        packages that moved with the candidate), the companion's bisect, the revert's confirmation."""
        if not found or self.first_bad is None or self.last_good is None:
            return AftermathOutcome()
        job, attribution, follow, offered, no_refine = self.config.job, None, None, None, False
        if job.attribute and also_changed:
            attribution = self._attribute(also_changed)
            follow, offered, no_refine = self._follow_or_suggest(attribution)
        confirmation = None
        if job.confirm_revert and self.first_bad.kind is CandidateKind.COMMIT and self.plan.repo_path:
            confirmation = confirm_by_revert(self.plan.repo_path, self.first_bad, self.phase.candidates[-1],
                                             self._judge_revert, CacheLayout(self.cache_dir).tmp)
        return AftermathOutcome(attribution, confirmation, follow, offered, no_refine)

    def _attribute(self, also_changed: dict[str, list[str]]) -> Attribution:
        self.recorder.note(f"also changed: {', '.join(also_changed)}; measuring which change explains the step")

        def judge_setup(label: str, c: Candidate, pins: dict[str, str]) -> Judgement:
            measurer = self.recorder.measurer(self.measurers.pinned(pins), self.plan.repo_path)
            return self.recorder.judged("attribution", measurer, c, self.phase.calibrated, label)[0]

        return attribute(self.config.job.package, self.last_good, self.first_bad, also_changed, judge_setup)

    def _judge_revert(self, c: Candidate) -> Judgement:
        measurer = self.recorder.measurer(self.measurers, self.plan.repo_path)
        return self.recorder.judged("revert", measurer, c, self.phase.calibrated)[0]

    def _follow_or_suggest(self, a: Attribution) -> tuple[Optional[FollowUp], Optional[list[str]], bool]:
        """The companion's bisect to run, or its command offered (with the note saying how), and whether the
        refine hint goes (the step is not the candidate's alone)."""
        note = self.recorder.note
        if a.kind is AttributionKind.INTERACTION:
            note("only a set of changes gives the step together (" + ", ".join(a.packages) + "); "
                 "bisect one of them with the others pinned at their first-bad versions")
            return None, None, True
        if a.kind is not AttributionKind.COMPANION:
            return None, None, False
        followed = follow_config(self.config, a, self.first_bad)
        if followed is None:
            note(f"the step comes with {a.minimal[0].describe()}; it cannot be followed from a commit candidate "
                 "or a package absent on one side: bisect it by hand")
            return None, None, True
        added = [p for p in followed.job.pins if p not in self.config.job.pins]
        command = follow_command(self.recorder.command, followed, added)
        if not should_follow(self.config, a):
            note(f"the step comes with {a.minimal[0].describe()}; bisect it with: {joined(command)}")
            return None, command, False
        note(f"following {a.minimal[0].describe()} (with {', '.join(map(str, added))})")
        pins = dict(added)
        return FollowUp(config=followed, measurers=self.measurers.pinned(pins), command=command), None, False
