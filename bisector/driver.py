"""The Bisector: plans candidates, runs search phases, records every step, assembles the result."""
from __future__ import annotations

import hashlib
import os
import shlex
from pathlib import Path
from typing import Optional, Protocol

from packaging.utils import canonicalize_name

from .boundary import also_changed, boundary_sides, environment_section
from .candidate import Candidate
from .config import JobConfig, Mode
from .envs import EnvManager, load_env_spec
from .envs.base import ROOT as TORCH
from .data import specs_dir
from .errors import BisectorError, UsageError
from .judge import Judgement
from .measure import Measurer
from .pins import apply_pins
from .phase import Phase, PhaseResult
from .plan import Plan, commit_plan, older_releases, release_plan
from .judge import judge
from .gpus import GpuPool, detect_gpus, effective_jobs
from .widen import walk_back
from .commandline import with_flags
from .project_url import repository_url
from .result import BisectResult, Point, Step
from .search import Outcome
from .store import RunRow, StepRow, Store, now
from . import gitrepo

ENVS_DIR = specs_dir()


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
    """Drives one bisect job against a store and an environment cache."""

    def __init__(self, config: JobConfig, store: Store, cache_dir: Path, handler: Optional[Handler] = None,
                 command: Optional[list[str]] = None):
        self.config, self.store, self.cache_dir = config, store, cache_dir
        self.handler = handler or SilentHandler()
        self.command = command or ["bisector", "run"]
        self.run_id = run_id_for(config)
        self.envs = EnvManager(cache_dir / "envs", backend=config.run.env_backend)
        self.spec = apply_pins(load_env_spec(config.job.env, ENVS_DIR), config.job.pins, config.job.package,
                               config.job.index_url)
        self.steps: list[Step] = []
        self.gpus = GpuPool(detect_gpus())
        self.notes: list[str] = []

    # -- recording --------------------------------------------------------------------------
    def _on_step(self, phase: str, c: Candidate, j: Judgement) -> None:
        reused = all(m.key in self._measurers[-1].reused_keys for m in j.measurements)
        step = Step(seq=len(self.steps), phase=phase, candidate=c.short, date=c.date, verdict=j.verdict.value,
                    value=j.value, metric=self.config.criterion.metric,
                    metrics=j.metrics, repeats=len(j.measurements), seconds=round(j.seconds, 3),
                    reason=j.reason, reused=reused)
        self.steps.append(step)
        self.store.add_step(StepRow(run_id=self.run_id, seq=step.seq, candidate=f"{phase} {c.ref}",
                                    verdict=step.verdict, value=step.value, reason=step.reason,
                                    seconds=step.seconds, measurements=[m.key for m in j.measurements]))
        self.handler.step(step)

    def _note(self, text: str) -> None:
        self.notes.append(text)
        self.handler.note(text)

    def _save_run(self, status: str, result: Optional[dict] = None) -> None:
        self.store.put_run(RunRow(id=self.run_id, created=self._started, updated=now(), kind="bisect",
                                  command=self.command, config=self.config.model_dump(mode="json"),
                                  status=status, result=result))

    # -- phases -----------------------------------------------------------------------------
    def _phase(self, name: str, plan: Plan) -> PhaseResult:
        if len(plan.candidates) < 2:
            raise UsageError("need at least two candidates to bisect")
        for text in plan.notes:
            self._note(text)
        self.handler.plan(name, plan.candidates)
        measurer = Measurer(self.store, self.envs, self.spec, self.config.probe, repo_path=plan.repo_path,
                            index_url=self.config.job.index_url, run_id=self.run_id, gpus=self.gpus)
        self._measurers.append(measurer)
        run = self.config.run
        jobs = effective_jobs(run.jobs, self.gpus.gpus)
        # default: prefetch when a core is left over beyond the probes running at once
        prefetch = run.prefetch if run.prefetch is not None else (os.cpu_count() or 1) > jobs
        phase = Phase(name, plan.candidates, measurer, self.config.criterion, self._on_step, jobs=jobs,
                      prefetch=prefetch, find_fix=self.config.job.find_fix,
                      confirm=self.config.criterion.should_confirm)
        return phase.run()

    def run(self) -> BisectResult:
        """Run the job to its answer; every measurement is stored as soon as it is taken."""
        self._started = now()
        self._measurers: list[Measurer] = []
        self.store.clear_steps(self.run_id)
        self._save_run("running")
        try:
            result = self._run_mode()
            result.notes = list(self.notes)  # notes made after the result was built (refine, torch) too
        except BaseException:
            self._save_run("interrupted")
            raise
        self._save_run(result.status, result.model_dump(mode="json"))
        return result

    def _run_mode(self) -> BisectResult:
        job = self.config.job
        if job.mode is Mode.COMMITS and canonicalize_name(job.package) == TORCH:
            raise UsageError("torch is bisected by release (each one becomes the shared base); building torch "
                             "commits from source takes hours: use --mode releases, or nightly wheels with "
                             "--index-url and --pre")
        if job.mode is Mode.COMMITS:
            if not job.repo:
                raise UsageError("--mode commits needs --repo (a local path or a git URL)")
            plan = commit_plan(job, job.repo, self.cache_dir)
            return self._result(plan, self._phase("commits", plan))
        plan = release_plan(job)
        res = self._phase("releases", plan)
        if res.search.outcome is Outcome.PREDATES_RANGE and job.widen and not job.find_fix:
            plan, res = self._widen(plan, res)
        result = self._result(plan, res)
        if job.mode is Mode.AUTO and result.status == "found":
            if canonicalize_name(job.package) == TORCH:
                self._note("torch stops at releases (its commits are not built per candidate); nightly wheels "
                           "between the two releases can be bisected with --index-url and --pre")
                return result
            return self._refine(plan, res, result)
        return result

    def _widen(self, plan: Plan, res: PhaseResult) -> tuple[Plan, PhaseResult]:
        """Walk back from good in growing steps (1, 2, 4, ...) until a release is GOOD, then bisect."""
        older = older_releases(self.config.job)
        measurer = self._measurers[-1]
        found = walk_back(older, lambda c: judge(measurer, res.calibrated, c),
                          lambda c, j: self._on_step("widen", c, j), self._note)
        if found is None:
            return plan, res
        self._note(f"widened: {found.ref} is GOOD; bisecting {found.ref}..{self.config.job.good}")
        job = self.config.job.model_copy(update={"good": found.ref, "bad": plan.candidates[0].ref})
        wider = release_plan(job)
        return wider, self._phase("releases", wider)

    def _refine(self, plan: Plan, res: PhaseResult, released: BisectResult) -> BisectResult:
        """Auto mode: bisect the commits between the adjacent last-good / first-bad releases."""
        job = self.config.job
        good, bad = plan.candidates[res.search.last_good].ref, plan.candidates[res.search.first_bad].ref
        repo = job.repo or self._metadata_repo(res)
        refine = with_flags(self.command, {"--mode": "commits", "--good": good, "--bad": bad, "--repo": "<REPO>"})
        if not repo:
            released.refine_command = refine
            self._note(f"no --repo given: the answer stops at releases; refine with: {refine}")
            return released
        try:
            path = gitrepo.open_repo(repo, self.cache_dir)
            tags = [gitrepo.tag_for_version(path, v) for v in (good, bad)]
            if None in tags:
                raise BisectorError(f"no tags for {good} / {bad} in {repo}")
            commits = commit_plan(job, repo, self.cache_dir, good=tags[0], bad=tags[1])
        except BisectorError as exc:
            released.refine_command = refine.replace("<REPO>", shlex.quote(repo))
            self._note(f"cannot refine to commits ({exc}); the release answer stands")
            return released
        return self._result(commits, self._phase("commits", commits))

    def _metadata_repo(self, res: PhaseResult) -> Optional[str]:
        """The repository named in the first bad release's metadata (its environment is at hand)."""
        for m in res.judgements[res.search.first_bad].measurements:
            env_path = m.details.get("env_path")
            url = repository_url(Path(env_path)) if env_path else None
            if url:
                self._note(f"repository from {self.config.job.package}'s metadata: {url}")
                return url
        return None

    # -- result -----------------------------------------------------------------------------
    def _point(self, phase: PhaseResult, index: Optional[int]) -> Optional[Point]:
        if index is None:
            return None
        j = phase.judgements.get(index)
        return Point.of(phase.candidates[index], j.value if j else None, j.metrics if j else None)

    def _result(self, plan: Plan, phase: PhaseResult) -> BisectResult:
        import re
        from .explain import point_details
        from .report import describe_rule, log_line
        s = phase.search
        # the search names candidates by index (#5); the report names them by version or SHA
        status, reason = s.outcome.value, re.sub(r"#(\d+)", lambda m: plan.candidates[int(m[1])].short, s.reason)
        if phase.confirmed is False:
            status, reason = "undecided", "re-measuring the boundary pair gave different verdicts: " + reason
        first, last = self._point(phase, s.first_bad), self._point(phase, s.last_good)
        for point, index in ((first, s.first_bad), (last, s.last_good)):
            if point is not None and index in phase.judgements:
                point.details = point_details(phase.judgements[index].measurements)
        compare = None
        if first and last and first.sha and plan.repo_url:
            compare = f"{plan.repo_url}/compare/{last.sha}...{first.sha}"
        widen, sides, job = None, boundary_sides(phase, self._result_details(phase)), self.config.job
        if s.outcome is Outcome.PREDATES_RANGE:
            widen = with_flags(self.command, {"--widen": None} if plan.candidates[0].kind.value == "release"
                               else {"--good": "<OLDER-GOOD>"})
            reason += f"; try an older good, e.g.: {widen}"
        return BisectResult(
            run_id=self.run_id, package=self.config.job.package, mode=plan.candidates[0].kind.value,
            status=status, reason=reason, find_fix=self.config.job.find_fix,
            criterion=phase.calibrated.describe(), first_bad=first, last_good=last,
            ambiguous=[plan.candidates[i].short for i in s.ambiguous],
            probes_run=sum(m.probes_run for m in self._measurers),
            measurements_reused=sum(len(m.reused_keys) for m in self._measurers),
            steps=list(self.steps), notes=list(self.notes), compare_link=compare, widen_command=widen,
            command=shlex.join(self.command), decision_rule=describe_rule(self.config.criterion, self.config.probe),
            probe=self._probe_facts(phase),
            environment=environment_section(sides, job.package, self.spec.name, self._base_label()),
            also_changed=also_changed(phase, sides, job.package, self.spec.companions),
            log=[log_line(st) for st in self.steps])

    def _base_label(self) -> str:
        if canonicalize_name(self.config.job.package) == TORCH:
            return "torch==<candidate> (each torch release is its own base)"
        return self.spec.base

    def _result_details(self, phase: PhaseResult) -> dict:
        for j in phase.judgements.values():
            for m in j.measurements:
                if m.status == "ok" and m.details.get("result"):
                    return m.details["result"]
        return {}

    def _probe_facts(self, phase: PhaseResult) -> dict:
        """Which probe ran: name or path or command, its version, config (hash and values), arguments."""
        probe = self.config.probe
        kind = "command" if probe.cmd else "built-in" if probe.name else "script"
        facts = {"probe": probe.label(), "kind": kind, "args": shlex.join(probe.args) or None,
                 "timeout": probe.timeout, "fingerprint": probe.fingerprint()}
        info = self._result_details(phase).get("probe") or {}
        facts.update({k: info.get(k) for k in ("name", "version", "config_hash", "config") if info.get(k)})
        return facts
