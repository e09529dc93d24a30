"""Assemble a phase's search into the typed result: the boundary points with their probe details,
links, hints, the probe and environment facts, and what else moved between the two sides."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Optional

from packaging.utils import canonicalize_name

from bisector.bisection.boundary import also_changed, boundary_sides, environment_section
from bisector.bisection.paired import boundary_evidence
from bisector.bisection.phase import PhaseResult
from bisector.bisection.plan import Plan
from bisector.commandline import with_flags
from bisector.config import JobConfig
from bisector.core.candidate import CandidateKind
from bisector.core.criterion import describe_rule
from bisector.core.measurement import Measurement, Status
from bisector.core.result import BisectResult, Point, Step
from bisector.core.search import Outcome
from bisector.envs import TORCH, EnvSpec
from bisector.envs.model.env_spec import NO_BASE
from bisector.explain.registry import compact_details


@dataclass(frozen=True)
class RunFacts:
    """What the driver knows of the whole run when a phase's result is assembled."""

    run_id: str
    config: JobConfig
    command: list[str]
    spec: EnvSpec
    steps: list[Step]
    notes: list[str]
    probes_run: int
    measurements_reused: int
    widen_stop: Optional[str] = None    # where --widen stopped and why, when it found no GOOD release


def assemble(run: RunFacts, plan: Plan, phase: PhaseResult) -> BisectResult:
    """The result of ``phase`` over ``plan``'s candidates."""
    s, job = phase.search, run.config.job
    status, reason, widen = _outcome(run, plan, phase)
    first, last = _point(phase, s.first_bad), _point(phase, s.last_good)
    compare = None
    if first and last and first.sha and plan.repo_url:
        compare = f"{plan.repo_url}/compare/{last.sha}...{first.sha}"
    sides = boundary_sides(phase, _result_details(phase))
    return BisectResult(
        run_id=run.run_id, package=job.package, mode=plan.candidates[0].kind, status=status, reason=reason,
        find_fix=job.find_fix, criterion=phase.calibrated.describe(), metric=run.config.criterion.metric,
        first_bad=first, last_good=last, ambiguous=[plan.candidates[i].short for i in s.ambiguous],
        probes_run=run.probes_run, measurements_reused=run.measurements_reused, steps=list(run.steps),
        notes=list(run.notes), compare_link=compare, widen_command=widen, command=shlex.join(run.command),
        decision_rule=describe_rule(run.config.criterion, run.config.probe.exit_code_mode),
        probe=_probe_facts(run.config, phase),
        environment=environment_section(sides, job.package, run.spec.name, _base_label(job.package, run.spec)),
        also_changed=also_changed(phase, sides, job.package, run.spec.companions),
        log=[step.log_line() for step in run.steps],
        evidence=boundary_evidence(phase.judgements, s.last_good, s.first_bad))


def _outcome(run: RunFacts, plan: Plan, phase: PhaseResult) -> tuple[Outcome, str, Optional[str]]:
    """The status, the reason, and for a range the regression predates, the command that widens it."""
    s = phase.search
    status, reason, widen = s.outcome, s.reason, None
    if phase.confirmed is False:
        status, reason = Outcome.UNDECIDED, "re-measuring the boundary pair gave different verdicts: " + reason
    if s.outcome is Outcome.PREDATES_RANGE and run.widen_stop:
        reason += "; " + run.widen_stop.removeprefix("--widen: ")
    elif s.outcome is Outcome.PREDATES_RANGE:
        releases = plan.candidates[0].kind is CandidateKind.RELEASE
        widen = with_flags(run.command, {"--widen": None} if releases else {"--good": "<OLDER-GOOD>"})
        reason += f"; try an older good, e.g.: {widen}"
    return status, reason, widen


def _point(phase: PhaseResult, index: Optional[int]) -> Optional[Point]:
    """The reported form of candidate ``index``, with the compact probe details of its last success."""
    if index is None:
        return None
    j = phase.judgements.get(index)
    point = Point.of(phase.candidates[index], j.value if j else None, j.metrics if j else None)
    if j is not None:
        point.details = point_details(j.measurements)
    return point


def point_details(measurements: list[Measurement]) -> dict:
    """Compact details of the last successful measurement (the one ``Point.metrics`` shows last)."""
    ok = [m for m in measurements if m.status is Status.OK and (m.details or {}).get("result")]
    return compact_details(ok[-1].details["result"], ok[-1].metrics) if ok else {}


def _result_details(phase: PhaseResult) -> dict:
    """The first successful probe result of the phase (what the probe says about itself)."""
    for j in phase.judgements.values():
        for m in j.measurements:
            if m.status is Status.OK and m.details.get("result"):
                return m.details["result"]
    return {}


def _probe_facts(config: JobConfig, phase: PhaseResult) -> dict:
    """Which probe ran: name or path or command, its version, config (hash and values), arguments,
    and the schema of its results (which tells the reports how to explain them)."""
    probe = config.probe
    kind = "command" if probe.cmd else "built-in" if probe.name else "script"
    facts = {"probe": probe.label(), "kind": kind, "args": shlex.join(probe.args) or None,
             "timeout": probe.timeout, "fingerprint": probe.fingerprint()}
    result = _result_details(phase)
    info = result.get("probe") or {}
    facts.update({k: info.get(k) for k in ("name", "version", "config_hash", "config") if info.get(k)})
    if result.get("schema_version"):
        facts["schema_version"] = result["schema_version"]
    return facts


def _base_label(package: str, spec: EnvSpec) -> str:
    if canonicalize_name(package) == TORCH:
        return "torch==<candidate> (each torch release is its own base)"
    if spec.base == NO_BASE:
        return "none (--torch per-candidate: each environment resolves its own torch)"
    return spec.base
