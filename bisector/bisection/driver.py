"""The Bisector: the bisect's modes (releases, widened back when good is already bad, then in auto mode
the commits between the boundary releases, or for torch the nightlies between them; nightlies alone;
commits alone), each phase's search and its follow-ups, recorded through one RunRecorder. Measuring goes
through the ``measurers`` it is handed (the seam)."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from packaging.utils import canonicalize_name

from bisector.bisection.aftermath import Aftermath
from bisector.bisection.assemble import (Answer, RunFacts, assemble, moved_with, phase_status,
                                        stopped_result)
from bisector.bisection.contrast import contrast_of, reference_of
from bisector.decide.judge import judge
from bisector.bisection.phase import PhaseResult
from bisector.bisection.nightly_plan import NO_NIGHTLY_INDEX, after_releases, nightly_plan
from bisector.bisection.plan import Plan, commit_plan, older_releases, release_plan
from bisector.bisection.recorder import Handler, RunRecorder, SilentHandler
from bisector.bisection.refine import refinement
from bisector.bisection.search_phase import search_phase
from bisector.decide.seam import MeasurerFactory
from bisector.bisection.widen import walk_back
from bisector.job.config import JobConfig, Mode
from bisector.core.default_rule import chosen_rule
from bisector.core.result import BisectResult
from bisector.core.search import Outcome
from bisector.envs import TORCH
from bisector.errors import BisectorError, UndecidedError, UsageError
from bisector.paths import default_cache_dir
from bisector.store.storage import Store

__all__ = ["Bisector", "Handler", "SilentHandler"]


class Bisector:
    """Drives one bisect job: steps go to ``store`` and ``handler``, measuring goes through ``measurers``;
    ``releases``: the release plan preflight resolved already (else it is resolved here); ``run_id``: a
    stored run resumed under its id (else each run has its own)."""

    def __init__(self, config: JobConfig, store: Store, measurers: MeasurerFactory,
                 handler: Optional[Handler] = None, command: Optional[list[str]] = None,
                 releases: Optional[Plan] = None, run_id: Optional[str] = None):
        self.config, self.store, self.measurers, self.releases = config, store, measurers, releases
        self.recorder = RunRecorder(config, store, run_id, command or ["bisector", "run"], handler)
        self.run_id = self.recorder.run_id   # a resumed or continued run keeps its id
        self.cache_dir = config.run.cache_dir or default_cache_dir()
        self._outer: Optional[tuple[Plan, PhaseResult]] = None   # the phase over the whole range

    def run(self) -> BisectResult:
        """Run the job to its answer; every measurement is stored as soon as it is taken. The result is
        assembled once, from the answer, the story around it and the run's record."""
        rec = self.recorder
        rec.begin()
        said = chosen_rule(self.config.criterion)
        if said:
            rec.note(said)
        self.run_id = rec.run_id
        try:
            answer = self._run_mode()
            contrast = contrast_of(self.config, rec, answer.measurers, answer.plan, answer.phase)
            result = assemble(self._facts(answer.measurers), answer, rec.summary(), reference_of(self.config),
                              contrast)
        except BisectorError as exc:   # rejected input, an answer of one line (cannot measure either endpoint)
            if not rec.steps:         # or a failure; with no step taken there is no run to list or resume
                rec.forget()          # (measurements stay stored)
            elif isinstance(exc, UndecidedError):   # final: what is known is stored, and a report renders it
                stopped = stopped_result(self._facts(self.measurers), str(exc), rec.summary())
                rec.save(Outcome.UNDECIDED, stopped.model_dump(mode="json"))
            else:
                rec.save("failed")
            raise
        except BaseException:
            rec.save("interrupted")
            raise
        rec.save(result.status, result.model_dump(mode="json"))
        return result

    def _facts(self, measurers: MeasurerFactory) -> RunFacts:
        return RunFacts(run_id=self.run_id, config=self.config, command=self.recorder.command, spec=measurers.spec,
                        outer=self._outer, cache_dir=self.cache_dir)

    def _run_mode(self) -> Answer:
        job = self.config.job
        problem = job.mode_problem()   # (preflight's first check; a library call comes here directly)
        if problem:
            raise UsageError(problem)
        torch = canonicalize_name(job.package) == TORCH
        if job.mode is Mode.COMMITS:
            return self._answer(commit_plan(job, job.repo, self.cache_dir), "commits", outer=True)
        if job.mode is Mode.NIGHTLIES:
            return self._answer(nightly_plan(job, self._stored()), "nightlies", outer=True,
                                measurers=self.measurers.nightlies(job.nightly_index))
        plan = self.releases or release_plan(job)
        res, widen_stop = search_phase("releases", plan, self.measurers, self.recorder), None
        if res.search.outcome is Outcome.PREDATES_RANGE and job.widen and not job.find_fix:
            plan, res, widen_stop = self._widen(plan, res)
        self._outer = (plan, res)
        answer = self._finish(plan, res, widen_stop)
        if job.mode is not Mode.AUTO or phase_status(res) is not Outcome.FOUND or answer.aftermath.attributed:
            return answer   # an attributed step is refined by following the attribution, not the candidate
        if torch:
            return self._nightlies(plan, res, answer)
        refined = refinement(self.recorder, plan, res, self.cache_dir)
        if refined.commits is None:
            return replace(answer, refine=refined.command)
        return self._answer(refined.commits, "commits")

    def _nightlies(self, plan: Plan, res: PhaseResult, answer: Answer) -> Answer:
        """torch after its releases: the nightlies between the boundary releases, from the nightly index."""
        job = self.config.job
        if not job.nightly_index:
            self.recorder.note(NO_NIGHTLY_INDEX)
            return answer
        nightlies, said = after_releases(job, plan, res, self._stored())
        self.recorder.note(said)
        if nightlies is None:
            return answer
        return self._answer(nightlies, "nightlies", measurers=self.measurers.nightlies(job.nightly_index))

    def _stored(self) -> list[str]:
        """The versions of the package measured with this probe before (a deleted nightly among them)."""
        fingerprint = self.config.probe.fingerprint()
        return [m.candidate for m in self.store.measurements_for(self.config.job.package, fingerprint)]

    def _widen(self, plan: Plan, res: PhaseResult) -> tuple[Plan, PhaseResult, Optional[str]]:
        """Walk back from good in growing steps (1, 2, 4, ...) until a release is GOOD, then bisect."""
        measurer, said, rec = self.recorder.measurer(self.measurers), [], self.recorder
        found = walk_back(older_releases(self.config.job), lambda c: judge(measurer, res.calibrated, c),
                          lambda c, j: rec.step("widen", c, j), lambda text: (said.append(text), rec.note(text)))
        if found is None:
            return plan, res, said[-1] if said else None
        rec.note(f"widened: {found.ref} is GOOD; bisecting {found.ref}..{self.config.job.good}")
        wider = release_plan(self.config.job.model_copy(update={"good": found.ref, "bad": plan.candidates[0].ref}))
        return wider, search_phase("releases", wider, self.measurers, rec), None

    def _answer(self, plan: Plan, name: str, outer: bool = False,
                measurers: Optional[MeasurerFactory] = None) -> Answer:
        measurers = measurers or self.measurers
        phase = search_phase(name, plan, measurers, self.recorder)
        self._outer = (plan, phase) if outer else self._outer
        return self._finish(plan, phase, measurers=measurers)

    def _finish(self, plan: Plan, phase: PhaseResult, widen_stop: Optional[str] = None,
                measurers: Optional[MeasurerFactory] = None) -> Answer:
        """The phase as an answer, with what a found boundary gets: attribution, follow, revert confirmation."""
        measurers = measurers or self.measurers
        found = phase_status(phase) is Outcome.FOUND
        moved = moved_with(self.config, measurers.spec, phase) if found else {}
        outcome = Aftermath(self.recorder, measurers, plan, phase, self.cache_dir).outcome(found, moved)
        followed = None
        if outcome.follow is not None:
            follow = outcome.follow
            followed = Bisector(follow.config, self.store, follow.measurers, handler=self.recorder.handler,
                                command=follow.command).run()
        return Answer(plan, phase, measurers, outcome, widen_stop, followed)
