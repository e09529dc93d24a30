"""A bisect job on the real engine: its environment spec, its plan checked before anything is created,
and the Bisector measuring through the engine (bisector.measure.assembly) every command shares."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from packaging.utils import canonicalize_name

from bisector.bisection.driver import Bisector, Handler
from bisector.bisection.nightly_plan import nightly_plan
from bisector.bisection.pins import apply_pins
from bisector.bisection.plan import JobPlan, commit_plan, release_plan
from bisector.job.config import JobConfig, JobSection, Mode
from bisector.data import specs_dir
from bisector.envs import TORCH, EnvSpec, load_env_spec
from bisector.core.requirements import same_version
from bisector.envs import local_torches
from bisector.core.requirements import CURRENT, PER_CANDIDATE
from bisector.errors import UsageError
from bisector.measure.assembly import Engine, build_engine, check_executor, probe_device
from bisector.measure.gpus import detect_gpus
from bisector.paths import default_cache_dir, default_store_path
from bisector.sources import git
from bisector.sources.index import find_release, list_releases
from bisector.sources.installer_config import resolve_index_url
from bisector.sources.repo_checks import check_builds_package, check_git_environment, local_repository
from bisector.store.storage import Store
from bisector.store.integrity import check_directory, check_run_paths


def job_spec(config: JobConfig) -> EnvSpec:
    """The job's environment spec (built-in name or path) with its torch choice (``--torch``) and its
    ``--with`` pins laid over it."""
    job = config.job
    return apply_pins(load_env_spec(job.env, specs_dir()), job.pins, job.package, job.index_url, config.env.torch)


def preflight(config: JobConfig) -> JobPlan:
    """Bad input as one line (UsageError) before anything is created or stored: the executor (and its
    cluster), the store and the cache directory, the probe (and a built-in probe's own check of its
    arguments), the env spec and its pins on the index, the repository (git's environment, the refs,
    the package it builds), and for releases the package and range. Returns what it resolved (the
    spec, the release plan), so the bisect does not resolve it again."""
    run, job = config.run, config.job
    problem = job.mode_problem()
    if problem:
        raise UsageError(problem)
    check_executor(run.executor, run.ray_address)
    check_run_paths(run.store, run.cache_dir)
    check_directory(Path(run.store or default_store_path()).expanduser().parent / "reports",
                    "the reports directory beside the store")   # (written after the run: a file there, refused now)
    gpus = detect_gpus()
    config.probe.check(probe_device(run.executor, gpus))
    spec = job_spec(config)
    check_pins(job, spec)
    check_torch(config.env.torch, spec)
    if job.mode is Mode.COMMITS or job.repo:
        _check_repository(config)
    if job.mode is Mode.COMMITS:
        return JobPlan(spec=spec, gpus=gpus)
    if job.mode is Mode.NIGHTLIES:
        nightly_plan(job, [])   # the days exist, of one build
        return JobPlan(spec=spec, gpus=gpus)
    return JobPlan(spec=spec, releases=release_plan(job), gpus=gpus)


def check_pins(job: JobSection, spec: EnvSpec) -> None:
    """Every ``--with`` pin names a release on its index (torch's, the base's, included)."""
    for name, version in job.pins:
        index_url = resolve_index_url(spec.index_url if canonicalize_name(name) == TORCH else job.index_url)
        try:
            find_release(list_releases(index_url, name), version)
        except UsageError as exc:
            raise UsageError(f"--with {name}=={version}: {exc}") from None


def check_torch(choice: Optional[str], spec: EnvSpec) -> None:
    """``--torch X.Y.Z`` names a torch that can be installed: the interpreter's own, a local wheel pip's
    configuration offers, or a release on the index the installers are configured for (the spec's
    own, or theirs); a usage error naming the nearest versions otherwise, before anything is built."""
    if choice in (None, CURRENT, PER_CANDIDATE) or not spec.base.startswith(f"{TORCH}=="):
        return   # the interpreter's torch, or each candidate's own: nothing to look up
    if any(same_version(t.version, choice) for t in local_torches()):
        return
    try:
        releases = list_releases(resolve_index_url(spec.index_url), TORCH)
        if not any(same_version(r.version, choice) for r in releases):
            find_release(releases, choice)
    except UsageError as exc:
        raise UsageError(f"--torch {choice}: {exc}") from None


def _check_repository(config: JobConfig) -> None:
    """The repository of a commit bisect (or of auto mode's refinement): git left alone by the
    environment, a local repository that is one, refs that resolve in order, the package it builds."""
    job = config.job
    check_git_environment()
    if git.is_url(job.repo):   # cloned into the cache by the run: only what needs no network here
        if job.mode is Mode.COMMITS:
            git.validate_ref(job.good), git.validate_ref(job.bad)
        return
    path = local_repository(job.repo)
    if canonicalize_name(job.package) == TORCH:
        return   # torch's repository is read, never built: the commits between two nightlies are counted in it
    ref = "HEAD"
    if job.mode is Mode.COMMITS:
        ref = commit_plan(job, job.repo, config.run.cache_dir or default_cache_dir()).candidates[-1].ref
    check_builds_package(path, ref, job.package, job.repo)


def bisector_for(config: JobConfig, store: Store, handler: Optional[Handler] = None,
                 command: Optional[list[str]] = None, engine: Optional[Engine] = None,
                 resolved: Optional[JobPlan] = None, run_id: Optional[str] = None) -> Bisector:
    """The Bisector of ``config`` measuring for real, on ``engine`` (a diff's, a matrix's) or its own
    (``run_id``: a stored run resumed under its id)."""
    resolved = resolved or JobPlan(spec=job_spec(config))
    engine = engine or build_engine(config.run, store, gpus=resolved.gpus)
    measurers = engine.measurers(resolved.spec, config.probe, config.job.index_url)
    return Bisector(config, store, measurers, handler=handler, command=command, releases=resolved.releases,
                    run_id=run_id)
