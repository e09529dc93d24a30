"""Verify a repro script as a maintainer would use it: build two fresh environments from exactly the
install lines its header prints (bisector.repro.fresh_venvs: the printed index, the printed pins;
the bisect's torch and a local clone stand in where the lines name a torch download or a repository
this machine does not reach, and the record says so), run the script in each, judge what it printed by
the run's criterion, and record both values and verdicts in the stored run (``repro`` in its result
and report files). ``verified`` only when the last good is GOOD and the first bad BAD there (the other
way round for --find-fix); an install line that fails is no verification.

The script is judged as it judges itself: by the run's threshold (stats mode: midway between the
boundary's medians), ``repeats`` runs per side; an exit-code script by its exit code. The same script
(its sha256) is not verified twice: the stored record stands.
"""
from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Optional

from bisector.decide.judge import Judgement, judge
from bisector.repro import probe_view
from bisector.repro.fresh_venvs import build_venvs, install_commands
from bisector.repro.header import CLONE, sides, vcs_url
from bisector.repro.compose import ReproScript
from bisector.bisection.wiring import job_spec
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.criterion import Compare, Criterion, calibrate
from bisector.core.measurement import Measurement
from bisector.core.result import BisectResult, Repro, ReproSide
from bisector.core.points import Point
from bisector.core.verdict import Verdict
from bisector.envs import TORCH, CacheLayout, ensure_overlay, overlay_of, resolve_base, site_packages, venv_run_env
from bisector.errors import EnvironmentFailure
from bisector.job.config import JobConfig
from bisector.measure.probe_process import run_probe
from bisector.paths import default_cache_dir
from bisector.redact import redact_text
from bisector.sources import git
from bisector.store.run_record import amend_result
from bisector.store.storage import RunRow, Store

STATS_RUNS = 3   # a stats-mode run's script, judged by the midpoint: runs per side


def candidate(package: str, p: Point) -> Candidate:
    """The candidate a reported point was (what its environment was built for)."""
    commit = p.kind is CandidateKind.COMMIT
    return Candidate(package=package, kind=p.kind, ref=p.sha if commit and p.sha else p.ref, date=p.date,
                     subject=p.subject, author=p.author, pr=p.pr)


class FreshVenv:
    """Runs the script in one fresh environment (the Measures protocol the judge reads; nothing stored)."""

    def __init__(self, probe, venv: Path, env_vars: dict[str, str], package: str, workdir: Optional[Path],
                 exit_code: bool):
        self.probe, self.venv, self.package, self.workdir = probe, venv, package, workdir
        self.env = {**venv_run_env(venv, env_vars), "BISECTOR_PACKAGE": package}
        self.exit_code_mode = exit_code
        self.probes_run, self.reused_keys = 0, set()

    def measure(self, c: Candidate, repeat: int = 0) -> Measurement:
        outcome = run_probe(self.probe, self.venv / "bin" / "python", {**self.env, "BISECTOR_CANDIDATE": c.ref},
                            workdir=self.workdir)
        self.probes_run += 1
        return Measurement(key=f"repro:{self.venv.name}:{repeat}", package=self.package, candidate=c.ref,
                           env_fingerprint=f"fresh-venv:{self.venv.name}", probe_fingerprint="repro", repeat=repeat,
                           status=outcome.status, metrics=outcome.metrics, exit_code=outcome.exit_code,
                           reason=outcome.reason, seconds=outcome.seconds, details=outcome.details())

    def prefetch(self, candidates: list[Candidate]) -> None:
        pass   # one environment, built already

    def speculate(self, needed: list[Candidate], likely: list[Candidate]) -> None:
        pass

    def warm(self, samples: list[tuple[Candidate, int]]) -> None:
        pass


def _side(j: Judgement) -> ReproSide:
    reason = j.reason if j.verdict is Verdict.SKIP or j.value is None else None
    return ReproSide(value=j.value, verdict=j.verdict, reason=reason)


def stand_ins(s: BisectResult, config: JobConfig, text: str, cache_dir: Path) -> tuple[dict, dict, list[str]]:
    """(printed text -> what is used instead, variables the lines read, both in words): a commit's
    repository is the bisect's local clone (``$REPO_URL``, or in place of a printed VCS URL); an index
    URL the written script shows redacted is the real one."""
    replace, env, said = {}, {}, []
    if s.last_good.kind is CandidateKind.COMMIT and config.job.repo:
        clone = git.open_repo(config.job.repo, cache_dir).resolve().as_uri()
        if CLONE in text:
            env["REPO_URL"] = clone
            said.append("REPO_URL = the bisect's local clone")
        for url in {u for u in (s.repo_url, config.job.repo) if u}:
            printed = f"git+{vcs_url(url)}@"
            if git.is_url(url) and printed in text:
                replace[printed] = f"git+{clone}@"
                said.append(f"{redact_text(vcs_url(url))} = the bisect's local clone of it")
    for url in filter(None, [config.job.index_url, *job_spec(config).extra_index_urls, job_spec(config).index_url]):
        shown = redact_text(url)
        if shown != url and shown in text:
            replace[shown] = url
            said.append("the index's credentials (redacted in the script) as configured")
    return replace, env, said


def verify(store: Store, result: BisectResult, config: JobConfig, path: Path, script: ReproScript,
           cache_dir: Optional[Path] = None) -> Repro:
    """Build fresh environments from the install lines of the script at ``path`` and run it in each (see
    the module); the stored record of ``result`` when it verified this very script before."""
    s, good, bad = sides(result)
    path = path.resolve()
    text = path.read_text()
    digest = hashlib.sha256(text.encode()).hexdigest()
    if result.repro is not None and result.repro.sha256 == digest and result.repro.path == str(path):
        return result.repro
    cache = Path(cache_dir or config.run.cache_dir or default_cache_dir())
    spec = job_spec(config)
    layout = CacheLayout(cache)
    base = resolve_base(spec, layout)
    probe = probe_view.verifying_probe(config, path, script.exit_code)
    runs = STATS_RUNS if config.criterion.compare is Compare.STATS else config.criterion.repeats
    criterion = Criterion() if script.exit_code else Criterion(
        metric=script.metric, threshold=script.threshold, direction=script.direction, repeats=runs, max_repeats=runs)
    calibrated = calibrate(criterion)
    replace, env, said = stand_ins(s, config, text, cache)
    layout.tmp.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=layout.tmp, prefix="repro-verify-") as work:
        try:
            made = build_venvs(install_commands(text), Path(work), Path(base.python), ensure_overlay(base, layout),
                               replace, env, tuple(said), side_overlays(store, s))
        except EnvironmentFailure as exc:
            failed = ReproSide(verdict=Verdict.SKIP, reason=str(exc))
            return Repro(path=str(path), last_good=failed, first_bad=failed, metric=script.metric,
                         threshold=script.threshold, verified=False, how=said, sha256=digest, left_out=script.left_out)
        if not {"good", "bad"} <= set(made.venvs):
            failed = ReproSide(verdict=Verdict.SKIP, reason="the script's install lines make no good and bad venvs")
            return Repro(path=str(path), last_good=failed, first_bad=failed, metric=script.metric,
                         threshold=script.threshold, verified=False, how=made.said, sha256=digest,
                         left_out=script.left_out)
        workdir = probe_view.workdir(config)
        last_good, first_bad = (
            _side(judge(FreshVenv(probe, made.venvs[venv], dict(spec.env_vars), s.package, workdir, script.exit_code),
                        calibrated, candidate(s.package, p)))
            for venv, p in (("good", good), ("bad", bad)))
    expected = (Verdict.BAD, Verdict.GOOD) if s.find_fix else (Verdict.GOOD, Verdict.BAD)
    return Repro(path=str(path), last_good=last_good, first_bad=first_bad, metric=script.metric,
                 threshold=script.threshold, verified=(last_good.verdict, first_bad.verdict) == expected,
                 how=made.said, sha256=digest, left_out=script.left_out)


def side_overlays(store: Store, s: BisectResult) -> dict[str, Path]:
    """When torch itself is the package under test, each side's torch is its own base: the overlay the
    environment that measured that side pointed at (found through the run's steps in ``store``), by venv
    name; sides without one are left out (their venv sees the job's base)."""
    if s.package.lower() != TORCH:
        return {}
    steps = store.steps(s.run_id)
    out = {}
    for venv, p in (("good", s.last_good), ("bad", s.first_bad)):
        ref = p.sha or p.ref
        for step in reversed(steps):
            keys = step.measurements if step.candidate.split(" ")[-1] == ref else []
            found = [m for m in map(store.get_measurement, keys) if m is not None and m.env is not None]
            overlay = next((o for m in found if (o := overlay_of(site_packages(Path(m.env.path)))) is not None), None)
            if overlay is not None:
                out[venv] = overlay
                break
    return out


def record(store: Store, run: RunRow, repro: Repro) -> BisectResult:
    """The stored run's result with ``repro``, stored again."""
    result = BisectResult.model_validate(run.result).model_copy(update={"repro": repro})
    amend_result(store, run, result.model_dump(mode="json"))
    return result
