"""What a found boundary gets before it is reported: the attribution of the step among what moved
(bisection.attribution), the companion's own bisect when it is the cause (bisection.follow), and for a
commit culprit its confirmation by revert (bisection.revert). Every trial is a step of the run, stored
the moment it is measured, so an interrupted run resumes with the missing ones only."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional, Protocol

from bisector.bisection.companion_trials import attribute
from bisector.bisection.follow_companion import follow_command, follow_config, should_follow
from bisector.bisection.judge import Judgement
from bisector.bisection.phase import PhaseResult
from bisector.bisection.plan import Plan
from bisector.bisection.revert import confirm_by_revert
from bisector.bisection.seam import MeasurerFactory, Measures
from bisector.commandline import with_flags
from bisector.config import JobConfig
from bisector.core.changes import Attribution, AttributionKind
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.result import BisectResult
from bisector.core.search import Outcome


class Host(Protocol):
    """What the aftermath needs of the driver running the bisect."""

    config: JobConfig
    measurers: MeasurerFactory
    run_id: str
    cache_dir: Path
    command: list[str]

    def measure_step(self, phase: str, measurer: Measures, c: Candidate, calibrated,
                     label: Optional[str] = None) -> tuple[Judgement, bool]: ...
    def note(self, text: str) -> None: ...
    def follow(self, config: JobConfig, measurers: MeasurerFactory, command: list[str]) -> BisectResult: ...
    def refresh(self, result: BisectResult) -> None: ...


class Aftermath:
    """Attribution, follow and revert confirmation of one found phase (see the module)."""

    def __init__(self, host: Host, plan: Plan, phase: PhaseResult):
        self.host, self.plan, self.phase = host, plan, phase
        s = phase.search
        self.first_bad = phase.candidates[s.first_bad] if s.first_bad is not None else None
        self.last_good = phase.candidates[s.last_good] if s.last_good is not None else None

    def finish(self, result: BisectResult) -> BisectResult:
        """``result`` with its attribution, followed bisect and confirmation (when they apply)."""
        if result.status is not Outcome.FOUND or self.first_bad is None or self.last_good is None:
            return result
        job = self.host.config.job
        if job.attribute and result.also_changed:
            result.attribution = self._attribute(result)
            self._follow_or_suggest(result)
        if job.confirm_revert and self.first_bad.kind is CandidateKind.COMMIT and self.plan.repo_path:
            result.confirmation = confirm_by_revert(self.plan.repo_path, self.first_bad, self.phase.candidates[-1],
                                                    self._judge_revert, self.host.cache_dir / "tmp")
        self.host.refresh(result)
        return result

    def _attribute(self, result: BisectResult) -> Attribution:
        self.host.note(f"also changed: {', '.join(result.also_changed)}; measuring which change explains the step")

        def judge_setup(label: str, c: Candidate, pins: dict[str, str]) -> tuple[Judgement, bool]:
            measurer = self.host.measurers.pinned(pins)(self.host.run_id, self.plan.repo_path)
            return self.host.measure_step("attribution", measurer, c, self.phase.calibrated, label)

        return attribute(self.host.config.job.package, self.last_good, self.first_bad, result.also_changed,
                         judge_setup)

    def _judge_revert(self, c: Candidate) -> Judgement:
        measurer = self.host.measurers(self.host.run_id, self.plan.repo_path)
        return self.host.measure_step("revert", measurer, c, self.phase.calibrated)[0]

    def _follow_or_suggest(self, result: BisectResult) -> None:
        """Follow the companion (or say how); the refine and widen hints follow the attribution."""
        a = result.attribution
        if a.kind is AttributionKind.INTERACTION:
            result.refine_command = None
            self.host.note("only a set of changes gives the step together (" + ", ".join(a.packages) + "); "
                           "bisect one of them with the others pinned at their first-bad versions")
        if a.kind is not AttributionKind.COMPANION:
            return
        followed = follow_config(self.host.config, a, self.first_bad)
        if followed is None:
            result.refine_command = None
            self.host.note(f"the step comes with {a.minimal[0].describe()}; it cannot be followed from a commit "
                           "candidate or a package absent on one side: bisect it by hand")
            return
        added = [p for p in followed.job.pins if p not in self.host.config.job.pins]
        command = follow_command(self.host.command, followed, added)
        result.refine_command, result.widen_command = shlex.join(command), None
        if not should_follow(self.host.config, a):
            self.host.note(f"the step comes with {a.minimal[0].describe()}; bisect it with: {shlex.join(command)}")
            return
        self.host.note(f"following {a.minimal[0].describe()} (with {', '.join(added)})")
        pins = dict(p.split("==", 1) for p in added)
        f = result.followed = self.host.follow(followed, self.host.measurers.pinned(pins), command)
        result.refine_command, result.widen_command = f.refine_command, f.widen_command
        if f.refine_command is None and f.status is Outcome.FOUND and f.mode is CandidateKind.RELEASE and f.last_good:
            result.refine_command = with_flags(command, {"--mode": "commits", "--good": f.last_good.ref,
                                                         "--bad": f.first_bad.ref, "--repo": "<REPO>"})
