"""A bisect job wired to the real engine: its environment spec, environment cache, GPUs and measurers."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from bisector.bisection.driver import Bisector, Handler
from bisector.bisection.pins import apply_pins
from bisector.bisection.plan import release_plan
from bisector.config import JobConfig, Mode
from bisector.data import specs_dir
from bisector.envs import EnvManager, EnvSpec, load_env_spec
from bisector.measure.assembly import check_executor, make_executor
from bisector.measure.gpus import GpuPool, detect_gpus, probe_cpus
from bisector.measure.measurer import Measurers
from bisector.errors import UsageError
from bisector.paths import default_cache_dir
from bisector.sources import git
from bisector.storage import Store


def job_spec(config: JobConfig) -> EnvSpec:
    """The job's environment spec (built-in name or path) with its ``--with`` pins laid over it."""
    job = config.job
    return apply_pins(load_env_spec(job.env, specs_dir()), job.pins, job.package, job.index_url)


def job_measurers(config: JobConfig, store: Store) -> Measurers:
    """Measurers over the job's spec and probe, the cache dir's environments and this machine's GPUs,
    taking measurements through the run's executor (local threads, or Ray tasks)."""
    run = config.run
    envs = EnvManager(run.cache_dir or default_cache_dir(), backend=run.env_backend, defer_health=True)
    gpus = detect_gpus()
    pool = GpuPool(gpus)
    executor = make_executor(run.executor, envs, pool, run.ray_address, run.cache_dir, warm=run.warm)
    cpus = probe_cpus(run.jobs, gpus) if executor.builds_here else 1
    return Measurers(store, envs, job_spec(config), config.probe, index_url=config.job.index_url,
                     gpus=pool, cpus=cpus, executor=executor)


def preflight(config: JobConfig) -> None:
    """Bad input as one line (UsageError) before anything is created or stored: the probe, the env
    spec and its pins, the repository of a commit bisect, and for releases the package and range."""
    check_executor(config.run.executor)  # --executor ray without Ray
    config.probe.script()
    job_spec(config)
    job = config.job
    if job.mode is Mode.COMMITS:
        if not job.repo:
            raise UsageError("--mode commits needs --repo (a local path or a git URL)")
        if not git.is_url(job.repo) and not Path(job.repo).expanduser().exists():
            raise UsageError(f"repository {job.repo} not found (no such directory)")
        return
    release_plan(job)


def bisector_for(config: JobConfig, store: Store, handler: Optional[Handler] = None,
                 command: Optional[list[str]] = None) -> Bisector:
    """The Bisector of ``config`` measuring for real."""
    return Bisector(config, store, job_measurers(config, store), handler=handler, command=command)
