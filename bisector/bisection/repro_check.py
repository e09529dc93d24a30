"""Verify a repro script where the bisect measured: run it, through the measuring engine, in the last
good and first bad environments (the same spec, pins and candidates, so the cached environments are
reused and a missing one is rebuilt exactly), judge what it printed by the run's criterion, and record
both values and verdicts in the stored run (``repro`` in its result and report files).

The script is judged as it judges itself: by the run's threshold (stats mode: midway between the
boundary's medians), ``repeats`` runs per side; an exit-code script by its exit code. ``verified``
when the last good is GOOD and the first bad BAD (the other way round for --find-fix). A script run
is stored like any measurement (its key has the script's fingerprint), so verifying the same script
again costs nothing.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

from bisector.decide.judge import Judgement, judge
from bisector.bisection.repro_script import ReproScript, sides
from bisector.bisection.wiring import job_spec
from bisector.measure.assembly import build_engine
from bisector.job.config import JobConfig
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.criterion import Compare, Criterion, calibrate
from bisector.core.result import BisectResult, Point, Repro, ReproSide
from bisector.core.verdict import Verdict
from bisector.job.probe_spec import ProbeSpec
from bisector.paths import default_cache_dir
from bisector.sources import git
from bisector.store.run_record import amend_result
from bisector.store.storage import RunRow, Store

STATS_RUNS = 3   # a stats-mode run's script, judged by the midpoint: runs per side


def candidate(package: str, p: Point) -> Candidate:
    """The candidate a reported point was (what its environment was built for)."""
    commit = p.kind is CandidateKind.COMMIT
    return Candidate(package=package, kind=p.kind, ref=p.sha if commit and p.sha else p.ref, date=p.date,
                     subject=p.subject, author=p.author, pr=p.pr)


def _side(j: Judgement) -> ReproSide:
    reason = j.reason if j.verdict is Verdict.SKIP or j.value is None else None
    return ReproSide(value=j.value, verdict=j.verdict, reason=reason)


def verify(store: Store, result: BisectResult, config: JobConfig, path: Path, script: ReproScript,
           cache_dir: Optional[Path] = None) -> Repro:
    """Run the script at ``path`` in both sides' environments of ``result`` (a run of ``config``)."""
    s, good, bad = sides(result)
    if cache_dir is not None:
        config = config.model_copy(update={"run": config.run.model_copy(update={"cache_dir": cache_dir})})
    path = path.resolve()
    timeout = config.probe.timeout
    probe = (ProbeSpec(cmd=f"sh {shlex.quote(str(path))}", timeout=timeout) if script.shell
             else ProbeSpec(path=path, timeout=timeout, cwd=config.probe.cwd if config.probe.command else None))
    repo = None
    if good.kind is CandidateKind.COMMIT and config.job.repo:
        repo = git.open_repo(config.job.repo, config.run.cache_dir or default_cache_dir())
    measurers = build_engine(config.run, store).measurers(job_spec(config), probe, config.job.index_url)
    if config.job.nightly_index:   # torch's nightlies come from their own index
        measurers = measurers.nightlies(config.job.nightly_index)
    measurer = measurers(s.run_id, repo)
    runs = STATS_RUNS if config.criterion.compare is Compare.STATS else config.criterion.repeats
    criterion = Criterion() if script.shell else Criterion(
        metric=script.metric, threshold=script.threshold, direction=script.direction, repeats=runs, max_repeats=runs)
    calibrated = calibrate(criterion)
    last_good, first_bad = (_side(judge(measurer, calibrated, candidate(s.package, p))) for p in (good, bad))
    expected = (Verdict.BAD, Verdict.GOOD) if s.find_fix else (Verdict.GOOD, Verdict.BAD)
    return Repro(path=str(path), last_good=last_good, first_bad=first_bad, metric=script.metric,
                 threshold=script.threshold, verified=(last_good.verdict, first_bad.verdict) == expected)


def record(store: Store, run: RunRow, repro: Repro) -> BisectResult:
    """The stored run's result with ``repro``, stored again."""
    result = BisectResult.model_validate(run.result).model_copy(update={"repro": repro})
    amend_result(store, run, result.model_dump(mode="json"))
    return result
