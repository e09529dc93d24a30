"""Assemble a phase's search into the typed result: the boundary points with their probe details,
links, hints, the probe and environment facts, and what else moved between the two sides."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from packaging.utils import canonicalize_name

from bisector.bisection.boundary import also_changed, boundary_sides, environment_section, judged_side, \
    point_environment
from bisector.bisection.aftermath import AftermathOutcome
from bisector.bisection.recorder import RunSummary
from bisector.bisection.nightly_plan import is_nightly_plan
from bisector.bisection.nightly_range import commit_range
from bisector.decide.paired import boundary_evidence
from bisector.decide.seam import MeasurerFactory
from bisector.bisection.phase import PhaseResult
from bisector.bisection.plan import Plan
from bisector.job.commandline import joined, with_words
from bisector.job.config import JobConfig, Mode
from bisector.core.candidate import CandidateKind
from bisector.core.criterion import Criterion, calibrate, needs_endpoints
from bisector.core.rule_text import describe_against_baseline, describe_rule
from bisector.core.facts import ProbeResult
from bisector.core.measurement import Measurement, Status
from bisector.core.probe_args import effective_args
from bisector.core.result import BisectResult, Contrast, made_by
from bisector.core.points import Point, ProbeFacts
from bisector.core.search import Outcome
from bisector.core.units import declared
from bisector.envs import TORCH, EnvSpec
from bisector.envs import NO_BASE
from bisector.explain.registry import compact_details
from bisector.sources import git


@dataclass(frozen=True)
class RunFacts:
    """What the driver knows of the whole run when its result is assembled."""

    run_id: str
    config: JobConfig
    command: list[str]
    spec: EnvSpec
    outer: Optional[tuple[Plan, PhaseResult]] = None   # the phase over the whole range (its endpoints)
    cache_dir: Optional[Path] = None    # where a repository URL is cloned (a nightly range's count)


@dataclass(frozen=True)
class Answer:
    """The phase the answer comes from and everything its boundary got: the measurers that measured it,
    the aftermath (attribution, confirmation, the companion's bisect), the followed bisect's own result,
    where --widen stopped, and the command that would refine a release answer (auto mode, no repository)."""

    plan: Plan
    phase: PhaseResult
    measurers: MeasurerFactory
    aftermath: AftermathOutcome = AftermathOutcome()
    widen_stop: Optional[str] = None    # where --widen stopped and why, when it found no GOOD release
    followed: Optional[BisectResult] = None
    refine: Optional[list[str]] = None


def phase_status(phase: PhaseResult) -> Outcome:
    """The phase's outcome; a boundary pair that re-measured with other verdicts is undecided."""
    return Outcome.UNDECIDED if phase.confirmed is False else phase.search.outcome


def moved_with(config: JobConfig, spec: EnvSpec, phase: PhaseResult) -> dict[str, list[str]]:
    """The stack and spec packages that moved between the boundary's two environments (name -> versions)."""
    return also_changed(phase, boundary_sides(phase, _first_result(phase)), config.job.package, spec.companions)


def assemble(run: RunFacts, answer: Answer, summary: RunSummary, reference: Optional[dict] = None,
             contrast: Optional[Contrast] = None) -> BisectResult:
    """The run's result, built once: the answer's phase over its plan's candidates, what its boundary got,
    the commands offered next, the story around it (``reference``, ``contrast``) and the run's record."""
    plan, phase = answer.plan, answer.phase
    s, job = phase.search, run.config.job
    status, reason, widen = _outcome(run, answer)
    first, last = _point(run, phase, s.first_bad), _point(run, phase, s.last_good)
    repo_url = plan.repo_url or (job.repo_url or "").rstrip("/") or _metadata_url(phase)
    for p in (first, last):
        if p is not None and p.kind is CandidateKind.COMMIT and p.link is None and repo_url:
            p.link, p.pr_link = f"{repo_url}/commit/{p.sha}", f"{repo_url}/pull/{p.pr}" if p.pr else None
    sides = boundary_sides(phase, _first_result(phase))
    good_end, bad_end = _ends(run, *(run.outer or (plan, phase)))
    nightly = is_nightly_plan(plan)
    commits = commit_range(job, phase, repo_url, run.cache_dir) if nightly else None
    refine, widen = offered_commands(answer, status, widen)
    a = answer.aftermath
    return BisectResult(
        run_id=run.run_id, package=job.package, mode=CandidateKind.NIGHTLY if nightly else plan.candidates[0].kind,
        status=status, reason=reason,
        find_fix=job.find_fix, criterion=phase.calibrated.describe(), metric=phase.calibrated.criterion.metric,
        first_bad=first, last_good=last, ambiguous=[plan.candidates[i].short for i in s.ambiguous],
        compare_link=commits.link if commits else compare_link(repo_url, last, first, job.repo),
        commit_range=commits, refine_command=refine, widen_command=widen, command=list(run.command),
        decision_rule=describe_rule(phase.calibrated.criterion, run.config.probe.judged_by_exit_code),
        probe=_probe_facts(run.config, phase),
        environment=environment_section(sides, job.package, answer.measurers.spec.name,
                                        _base_label(job.package, answer.measurers.spec)),
        also_changed=also_changed(phase, sides, job.package, answer.measurers.spec.companions),
        attribution=a.attribution, confirmation=a.confirmation, followed=answer.followed,
        evidence=boundary_evidence(phase.judgements, s.last_good, s.first_bad),
        good_end=good_end, bad_end=bad_end, threshold=phase.calibrated.threshold, repo_url=repo_url,
        bisector_version=made_by(), units=declared({k for j in phase.judgements.values() for m in j.measurements
                                                    for k in m.metrics}),
        reference=reference, contrast=contrast, **_record(summary))


def stopped_result(run: RunFacts, reason: str, summary: RunSummary) -> BisectResult:
    """The result of a run stopped undecided before any phase's answer (both endpoints unmeasurable, say):
    its reason, the criterion, the command and the steps taken."""
    config = run.config
    kind = CandidateKind.COMMIT if config.job.mode is Mode.COMMITS else CandidateKind.RELEASE
    return BisectResult(run_id=run.run_id, package=config.job.package, mode=kind, status=Outcome.UNDECIDED,
                        reason=reason, find_fix=config.job.find_fix, criterion=_rule(config.criterion),
                        metric=config.criterion.metric, command=list(run.command),
                        decision_rule=describe_rule(config.criterion, config.probe.judged_by_exit_code),
                        bisector_version=made_by(), **_record(summary))


def _record(summary: RunSummary) -> dict:
    return {"steps": list(summary.steps), "log": [s.log_line() for s in summary.steps], "notes": list(summary.notes),
            "probes_run": summary.probes_run, "measurements_reused": summary.measurements_reused}


def _rule(c: Criterion) -> str:
    """The criterion as a result states it, before any endpoint was measured (a relative rule in words)."""
    if needs_endpoints(c):
        return describe_against_baseline(c).replace("the baseline cell", "the good endpoint")
    return calibrate(c).describe()


def offered_commands(answer: Answer, status: Outcome,
                     widen: Optional[list[str]]) -> tuple[Optional[list[str]], Optional[list[str]]]:
    """The one writer of the commands a result offers next, as words: the refine command (the commits
    between two releases, the companion's bisect, the followed bisect's own) and the widen command."""
    a, f = answer.aftermath, answer.followed
    refine = None if a.no_refine else answer.refine
    if a.offered is not None:
        refine, widen = a.offered, None
    if f is not None:   # the followed bisect's hints, and its release answer refined to the companion's commits
        refine, widen = f.refine_command, f.widen_command
        if refine is None and f.status is Outcome.FOUND and f.mode is CandidateKind.RELEASE and f.last_good:
            refine = with_words(a.follow.command, {"--mode": "auto", "--good": f.last_good.ref,
                                                   "--bad": f.first_bad.ref, "--repo": "<REPO>"})
    return refine, widen


def compare_link(repo_url: Optional[str], last: Optional[Point], first: Optional[Point],
                 repo: Optional[str] = None) -> Optional[str]:
    """``<repo>/compare/<last good>...<first bad>``: commits by SHA, releases by their tags (looked up
    in a local ``repo`` when there is one, else the ``v<version>`` tags of the ML stack)."""
    if not repo_url or last is None or first is None:
        return None
    if first.sha and last.sha:
        return f"{repo_url}/compare/{last.sha}...{first.sha}"
    local = Path(repo).expanduser() if repo and not git.is_url(repo) else None

    def tag(version: str) -> str:
        found = git.tag_for_version(local, version) if local is not None and local.is_dir() else None
        return found or f"v{version}"

    return f"{repo_url}/compare/{tag(last.ref)}...{tag(first.ref)}"


def metadata_url(phase: PhaseResult, index: Optional[int]) -> Optional[str]:
    """The repository URL that candidate ``index``'s metadata names, read in its measured environment."""
    for m in phase.judgements[index].measurements if index in phase.judgements else []:
        url = m.env.repository_url if m.env else None
        if url:
            return url
    return None


def _metadata_url(phase: PhaseResult) -> Optional[str]:
    """A browsable repository URL from the boundary's metadata (first bad, else last good)."""
    urls = (metadata_url(phase, i) for i in (phase.search.first_bad, phase.search.last_good))
    return next((git.web_url(u) for u in urls if u and git.web_url(u)), None)


def _ends(run: RunFacts, plan: Plan, phase: PhaseResult) -> tuple[Optional[Point], Optional[Point]]:
    """The good and bad endpoints of the whole range, as measured (the newer is good with --find-fix)."""
    older, newer = _point(run, phase, 0), _point(run, phase, len(plan.candidates) - 1)
    return (newer, older) if run.config.job.find_fix else (older, newer)


def _outcome(run: RunFacts, answer: Answer) -> tuple[Outcome, str, Optional[list[str]]]:
    """The status, the reason, and for a range the regression predates, the command that widens it."""
    plan, phase = answer.plan, answer.phase
    s = phase.search
    status, reason, widen = phase_status(phase), s.reason, None
    if status is not s.outcome:
        reason = "re-measuring the boundary pair gave different verdicts: " + reason
    if s.outcome is Outcome.PREDATES_RANGE and answer.widen_stop:
        reason += "; " + answer.widen_stop.removeprefix("--widen: ")
    elif s.outcome is Outcome.PREDATES_RANGE:
        releases = plan.candidates[0].kind is CandidateKind.RELEASE
        widen = with_words(run.command, {"--widen": None} if releases else {"--good": "<OLDER-GOOD>"})
        reason += f"; try an older good, e.g.: {joined(widen)}"
    return status, reason, widen


def _point(run: RunFacts, phase: PhaseResult, index: Optional[int]) -> Optional[Point]:
    """The reported form of candidate ``index``, with the compact probe details of its last success
    and its environment."""
    if index is None:
        return None
    j = phase.judgements.get(index)
    point = Point.of(phase.candidates[index], j.value if j else None, j.metrics if j else None)
    if j is not None:
        point.details = point_details(j.measurements)
        side = judged_side(phase, index, _first_result(phase))
        point.env, point.pins = point_environment(side, run.config.job.package, run.spec.companions)
    return point


def point_details(measurements: list[Measurement]) -> dict:
    """Compact details of the last successful measurement (the one ``Point.metrics`` shows last)."""
    ok = [m for m in measurements if m.status is Status.OK and m.result]
    return compact_details(ok[-1].result.fields(), ok[-1].metrics) if ok else {}


def _first_result(phase: PhaseResult) -> ProbeResult:
    """The first successful probe result of the phase (what the probe says about itself)."""
    for j in phase.judgements.values():
        for m in j.measurements:
            if m.status is Status.OK and m.result:
                return m.result
    return ProbeResult()


def _probe_facts(config: JobConfig, phase: PhaseResult) -> ProbeFacts:
    """Which probe ran: name or path or command, its version, config (hash and values), arguments,
    and the schema of its results (which tells the reports how to explain them)."""
    probe = config.probe
    facts = {"probe": probe.label(), "kind": probe.kind_label, "args": joined(effective_args(probe.args)) or None,
             "timeout": probe.timeout, "fingerprint": probe.fingerprint()}
    result = _first_result(phase)
    facts.update({k: result.probe.get(k) for k in ("name", "version", "config_hash", "config")
                  if result.probe.get(k)})
    if result.schema_version:
        facts["schema_version"] = result.schema_version
    return ProbeFacts.model_validate(facts)


def _base_label(package: str, spec: EnvSpec) -> str:
    if canonicalize_name(package) == TORCH:
        return "torch==<candidate> (each torch release or nightly is its own base)"
    if spec.base == NO_BASE:
        return "none (--torch per-candidate: each environment resolves its own torch)"
    return spec.base
