"""A bisect job on the real engine: its environment spec, its plan checked before anything is created,
and the Bisector measuring through the engine (bisector.measure.assembly) every command shares."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from bisector.bisection.driver import Bisector, Handler
from bisector.bisection.pins import apply_pins
from bisector.bisection.plan import JobPlan, release_plan
from bisector.config import JobConfig, Mode
from bisector.data import specs_dir
from bisector.envs import EnvSpec, load_env_spec
from bisector.errors import UsageError
from bisector.measure.assembly import Engine, build_engine, check_executor
from bisector.sources import git
from bisector.storage import Store


def job_spec(config: JobConfig) -> EnvSpec:
    """The job's environment spec (built-in name or path) with its torch choice (``--torch``) and its
    ``--with`` pins laid over it."""
    job = config.job
    return apply_pins(load_env_spec(job.env, specs_dir()), job.pins, job.package, job.index_url, config.env.torch)


def preflight(config: JobConfig) -> JobPlan:
    """Bad input as one line (UsageError) before anything is created or stored: the probe, the env
    spec and its pins, the repository of a commit bisect, and for releases the package and range.
    Returns what it resolved (the spec, the release plan), so the bisect does not resolve it again."""
    check_executor(config.run.executor)  # --executor ray without Ray
    config.probe.script()
    spec = job_spec(config)
    job = config.job
    if job.mode is Mode.COMMITS:
        if not job.repo:
            raise UsageError("--mode commits needs --repo (a local path or a git URL)")
        if not git.is_url(job.repo) and not Path(job.repo).expanduser().exists():
            raise UsageError(f"repository {job.repo} not found (no such directory)")
        return JobPlan(spec=spec)
    return JobPlan(spec=spec, releases=release_plan(job))


def bisector_for(config: JobConfig, store: Store, handler: Optional[Handler] = None,
                 command: Optional[list[str]] = None, engine: Optional[Engine] = None,
                 resolved: Optional[JobPlan] = None, run_id: Optional[str] = None) -> Bisector:
    """The Bisector of ``config`` measuring for real, on ``engine`` (a diff's, a matrix's) or its own
    (``run_id``: a stored run resumed under its id)."""
    resolved = resolved or JobPlan(spec=job_spec(config))
    engine = engine or build_engine(config.run, store)
    measurers = engine.measurers(resolved.spec, config.probe, config.job.index_url)
    return Bisector(config, store, measurers, handler=handler, command=command, releases=resolved.releases,
                    run_id=run_id)
