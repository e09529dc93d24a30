"""The Bisector: plans candidates, runs search phases, records every step, assembles the result.

Releases first (widened back when the good endpoint is already bad), then in auto mode the commits
between the boundary releases. Measuring goes through the ``measurers`` it is handed (the seam):
bisector.measure's real one, or a fake in the fast tests.
"""
from __future__ import annotations

import hashlib
import os
import shlex
from pathlib import Path
from typing import Optional, Protocol

from packaging.utils import canonicalize_name

from bisector.bisection.aftermath import Aftermath
from bisector.bisection.assemble import RunFacts, assemble
from bisector.bisection.contrast import is_the_jobs_own, measure_contrast
from bisector.bisection.judge import Judgement, judge
from bisector.bisection.phase import Phase, PhaseResult, flipped
from bisector.bisection.plan import Plan, commit_plan, older_releases, release_plan
from bisector.bisection.seam import MeasurerFactory, Measures
from bisector.bisection.stats_phase import StatsPhase
from bisector.bisection.widen import walk_back
from bisector.commandline import with_flags
from bisector.config import JobConfig, Mode
from bisector.core.changes import AttributionKind
from bisector.core.criterion import Compare
from bisector.core.candidate import Candidate
from bisector.core.measurement import Status
from bisector.core.result import BisectResult, Step
from bisector.core.search import Outcome
from bisector.envs import TORCH
from bisector.envs.check.project_url import repository_url
from bisector.errors import BisectorError, UndecidedError, UsageError
from bisector.paths import default_cache_dir
from bisector.sources import git
from bisector.storage import RunKind, RunRow, RunState, StepRow, Store, now

TORCH_COMMITS = ("torch is bisected by release (each one becomes the shared base); building torch commits from "
                 "source takes hours: use --mode releases, or nightly wheels with --index-url and --pre")
TORCH_STOPS = ("torch stops at releases (its commits are not built per candidate); nightly wheels between the "
               "two releases can be bisected with --index-url and --pre")


class Handler(Protocol):
    """Observes a bisect (the CLI prints; a library user may collect)."""

    def note(self, text: str) -> None: ...
    def plan(self, phase: str, candidates: list[Candidate]) -> None: ...
    def step(self, step: Step) -> None: ...


class SilentHandler:
    """A handler that ignores everything (the library default)."""

    def note(self, text: str) -> None:
        pass

    def plan(self, phase: str, candidates: list[Candidate]) -> None:
        pass

    def step(self, step: Step) -> None:
        pass


def run_id_for(config: JobConfig) -> str:
    """Identical jobs share a run id, so an identical command resumes the same run."""
    return hashlib.sha256(config.model_dump_json(exclude={"run"}).encode()).hexdigest()[:12]


class Bisector:
    """Drives one bisect job: steps go to ``store`` and ``handler``, measuring goes through ``measurers``."""

    def __init__(self, config: JobConfig, store: Store, measurers: MeasurerFactory,
                 handler: Optional[Handler] = None, command: Optional[list[str]] = None):
        self.config, self.store, self.measurers = config, store, measurers
        self.handler = handler or SilentHandler()
        self.command = command or ["bisector", "run"]
        self.cache_dir = config.run.cache_dir or default_cache_dir()
        self.run_id = run_id_for(config)
        self.steps: list[Step] = []
        self.notes: list[str] = []
        self._measurers: list[Measures] = []
        self._started = now()
        self._final: Optional[tuple[Plan, PhaseResult]] = None   # the phase the answer came from
        self._widen_stop: Optional[str] = None
        self._metric_seen = False

    def run(self) -> BisectResult:
        """Run the job to its answer; every measurement is stored as soon as it is taken."""
        self._started, self.steps, self.notes, self._measurers = now(), [], [], []
        self._metric_seen = False
        self.store.clear_steps(self.run_id)
        self._save_run(RunState.RUNNING)
        try:
            result = self._with_story(self._run_mode())
            result.notes = list(self.notes)  # notes made after the result was built (refine, torch) too
        except BisectorError as exc:   # rejected input, an answer of one line (cannot measure either endpoint)
            if not self.steps:        # or a failure; with no step taken there is no run to list or resume
                self.store.delete_run(self.run_id)   # (measurements stay stored)
            else:
                self._save_run(Outcome.UNDECIDED if isinstance(exc, UndecidedError) else RunState.FAILED)
            raise
        except BaseException:
            self._save_run(RunState.INTERRUPTED)
            raise
        self._save_run(result.status, result.model_dump(mode="json"))
        return result

    # -- recording --------------------------------------------------------------------------
    def _on_step(self, phase: str, c: Candidate, j: Judgement, label: Optional[str] = None) -> None:
        self._check_metric(j)
        reused = all(m.key in self._measurers[-1].reused_keys for m in j.measurements)
        step = Step(seq=len(self.steps), phase=phase, candidate=label or c.short, date=c.date, verdict=j.verdict,
                    value=j.value, metric=self.config.criterion.metric, metrics=j.metrics,
                    repeats=len(j.measurements), seconds=round(j.seconds, 3), reason=j.reason, reused=reused)
        self.steps.append(step)
        self.store.add_step(StepRow(run_id=self.run_id, seq=step.seq, candidate=f"{phase} {c.ref}",
                                    verdict=step.verdict, value=step.value, reason=step.reason,
                                    seconds=step.seconds, measurements=[m.key for m in j.measurements]))
        self.handler.step(step)

    def _check_metric(self, j: Judgement) -> None:
        """The criterion's metric missing from a clean probe result (every cell measured) is a
        typo, not a SKIP: stop at the first such measurement and list what the probe produces."""
        metric = self.config.criterion.metric
        if not metric or self._metric_seen:
            return
        clean = [m for m in j.measurements if m.status is Status.OK and m.metrics and not
                 ((m.details or {}).get("result") or {}).get("cell_errors")]
        if any(metric in m.metrics for m in clean):
            self._metric_seen = True
        elif clean:
            produced = sorted(clean[-1].metrics)
            shown = ", ".join(produced[:12]) + (f" (and {len(produced) - 12} more)" if len(produced) > 12 else "")
            raise UsageError(f"metric {metric!r} is not produced by the probe; it produces: {shown}")

    def _note(self, text: str) -> None:
        self.notes.append(text)
        self.handler.note(text)

    # -- what a found boundary gets (bisection.aftermath calls these) ------------------------
    def note(self, text: str) -> None:
        """A note for the user and the result."""
        self._note(text)

    def measure_step(self, phase: str, measurer: Measures, c: Candidate, calibrated,
                     label: Optional[str] = None) -> tuple[Judgement, bool]:
        """Judge ``c`` with ``measurer`` (flipped for --find-fix), record it as a step; (judgement, reused)."""
        self._measurers.append(measurer)
        j = judge(measurer, calibrated, c)
        if self.config.job.find_fix:
            j.verdict = flipped(j.verdict)
        self._on_step(phase, c, j, label)
        return j, self.steps[-1].reused

    def follow(self, config: JobConfig, measurers: MeasurerFactory, command: list[str]) -> BisectResult:
        """The bisect of a companion (its own stored run), reported through this run's handler."""
        return Bisector(config, self.store, measurers, handler=self.handler, command=command).run()

    def refresh(self, result: BisectResult) -> None:
        """Bring the result's steps and counts up to date with the steps taken after it was assembled."""
        result.steps, result.log = list(self.steps), [step.log_line() for step in self.steps]
        result.probes_run = sum(m.probes_run for m in self._measurers)
        result.measurements_reused = sum(len(m.reused_keys) for m in self._measurers)

    def _save_run(self, status: str, result: Optional[dict] = None) -> None:
        self.store.put_run(RunRow(id=self.run_id, created=self._started, updated=now(), kind=RunKind.BISECT,
                                  command=self.command, config=self.config.model_dump(mode="json"),
                                  status=status, result=result))

    # -- phases -----------------------------------------------------------------------------
    def _phase(self, name: str, plan: Plan) -> PhaseResult:
        if len(plan.candidates) < 2:
            raise UsageError("need at least two candidates to bisect")
        for text in plan.notes:
            self._note(text)
        self.handler.plan(name, plan.candidates)
        measurer = self.measurers(self.run_id, plan.repo_path)
        self._measurers.append(measurer)
        run, criterion = self.config.run, self.config.criterion
        jobs = max(1, min(run.jobs, self.measurers.slots))
        # default: prefetch when a core is left over beyond the probes running at once, or (Ray) always:
        # there spare slots measure the likely next midpoints
        speculates = self.measurers.speculates
        prefetch = run.prefetch if run.prefetch is not None else ((os.cpu_count() or 1) > jobs or speculates)
        kind = StatsPhase if criterion.compare is Compare.STATS else Phase
        phase = kind(name, plan.candidates, measurer, criterion, self._on_step, jobs=jobs, prefetch=prefetch,
                     find_fix=self.config.job.find_fix, confirm=criterion.should_confirm,
                     slots=self.measurers.slots if speculates and prefetch else 0)
        return phase.run()

    def _run_mode(self) -> BisectResult:
        job = self.config.job
        torch = canonicalize_name(job.package) == TORCH
        if job.mode is Mode.COMMITS and torch:
            raise UsageError(TORCH_COMMITS)
        if job.mode is Mode.COMMITS:
            if not job.repo:
                raise UsageError("--mode commits needs --repo (a local path or a git URL)")
            plan = commit_plan(job, job.repo, self.cache_dir)
            return self._finish(plan, self._phase("commits", plan))
        plan = release_plan(job)
        res = self._phase("releases", plan)
        if res.search.outcome is Outcome.PREDATES_RANGE and job.widen and not job.find_fix:
            plan, res = self._widen(plan, res)
        result = self._finish(plan, res)
        if job.mode is not Mode.AUTO or result.status is not Outcome.FOUND:
            return result
        if result.attribution is not None and result.attribution.kind is not AttributionKind.CANDIDATE:
            return result  # the refinement follows the attribution (done by the aftermath), not the candidate
        if torch:
            self._note(TORCH_STOPS)
            return result
        return self._refine(plan, res, result)

    def _widen(self, plan: Plan, res: PhaseResult) -> tuple[Plan, PhaseResult]:
        """Walk back from good in growing steps (1, 2, 4, ...) until a release is GOOD, then bisect."""
        measurer, said = self._measurers[-1], []
        found = walk_back(older_releases(self.config.job), lambda c: judge(measurer, res.calibrated, c),
                          lambda c, j: self._on_step("widen", c, j), lambda text: (said.append(text), self._note(text)))
        if found is None:
            self._widen_stop = said[-1] if said else None
            return plan, res
        self._note(f"widened: {found.ref} is GOOD; bisecting {found.ref}..{self.config.job.good}")
        wider = release_plan(self.config.job.model_copy(update={"good": found.ref, "bad": plan.candidates[0].ref}))
        return wider, self._phase("releases", wider)

    def _refine(self, plan: Plan, res: PhaseResult, released: BisectResult) -> BisectResult:
        """Auto mode: bisect the commits between the adjacent last-good / first-bad releases."""
        job = self.config.job
        good, bad = plan.candidates[res.search.last_good].ref, plan.candidates[res.search.first_bad].ref
        named = None if job.repo else self._metadata_repo(res)
        repo = job.repo or (named if job.clone else None)
        refine = with_flags(self.command, {"--mode": "commits", "--good": good, "--bad": bad, "--repo": "<REPO>"})
        if not repo:
            released.refine_command = refine
            where = (f"; {job.package}'s metadata names {named}: refine with --repo <a clone of it>, or add --clone "
                     "to let bisector clone it" if named else "")
            self._note(f"no --repo given: the answer stops at releases{where}; refine with: {refine}")
            return released
        try:
            path = git.open_repo(repo, self.cache_dir)
            tags = [git.tag_for_version(path, v) for v in (good, bad)]
            if None in tags:
                raise BisectorError(f"no tags for {good} / {bad} in {repo}")
            commits = commit_plan(job, repo, self.cache_dir, good=tags[0], bad=tags[1])
        except BisectorError as exc:
            released.refine_command = refine.replace("<REPO>", shlex.quote(repo))
            self._note(f"cannot refine to commits ({exc}); the release answer stands")
            return released
        return self._finish(commits, self._phase("commits", commits))

    def _metadata_repo(self, res: PhaseResult) -> Optional[str]:
        """The repository named in the first bad release's metadata (its environment is at hand)."""
        for m in res.judgements[res.search.first_bad].measurements:
            env_path = m.details.get("env_path")
            url = repository_url(Path(env_path)) if env_path else None
            if url:
                if self.config.job.clone:
                    self._note(f"repository from {self.config.job.package}'s metadata: {url}")
                return url
        return None

    def _finish(self, plan: Plan, phase: PhaseResult) -> BisectResult:
        """The phase's result with what a found boundary gets: attribution, follow, revert confirmation."""
        return Aftermath(self, plan, phase).finish(self._result(plan, phase))

    def _result(self, plan: Plan, phase: PhaseResult) -> BisectResult:
        self._final = (plan, phase)
        return assemble(self._facts(), plan, phase)

    def _facts(self) -> RunFacts:
        return RunFacts(run_id=self.run_id, config=self.config, command=self.command, spec=self.measurers.spec,
                        steps=self.steps, notes=self.notes, probes_run=sum(m.probes_run for m in self._measurers),
                        measurements_reused=sum(len(m.reused_keys) for m in self._measurers),
                        widen_stop=self._widen_stop)

    def _with_story(self, result: BisectResult) -> BisectResult:
        """The upstream report's numbers ([reference], when it is about this package) and the
        [contrast] setting measured at the ends of the range the answer came from."""
        config = self.config
        if config.reference is not None and config.reference.package == canonicalize_name(config.job.package):
            result.reference = config.reference.model_dump(mode="json")
        if (config.contrast is None or self._final is None or config.probe.exit_code_mode
                or is_the_jobs_own(config.contrast, config.probe.args)):
            return result
        plan, phase = self._final
        args = [*config.probe.args, *config.contrast.args]   # the job's setting, with the contrast's changes
        measurer = self.measurers.with_probe_args(args)(self.run_id, plan.repo_path)
        self._measurers.append(measurer)
        ends = [plan.candidates[0], plan.candidates[-1]]
        result.contrast = measure_contrast(config.contrast, measurer, phase.calibrated, ends, self._on_step)
        facts = self._facts()
        return result.model_copy(update={"steps": list(facts.steps), "log": [s.log_line() for s in facts.steps],
                                         "probes_run": facts.probes_run,
                                         "measurements_reused": facts.measurements_reused})
