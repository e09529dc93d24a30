"""Take one measurement: build (or reuse) the candidate's environment, run the probe in it.

The same code runs in the driver's threads (the local executor) and on a Ray node (the ray
executor's task), so a measurement means the same wherever it was taken. What is taken here is
never stored here: the driver stores it.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, ContextManager, Optional

from pydantic import BaseModel, ConfigDict

from bisector.console import activity
from bisector.core.measurement import Measurement, Status
from bisector.envs import Environment, EnvManager, Recipe
from bisector.envs import site_packages
from bisector.envs import homes_of, proof_env, proof_problems, read_proof, static_report
from bisector.core.facts import EnvFacts
from bisector.envs import repository_url
from bisector.errors import EnvironmentFailure
from bisector.measure.probe_process import ProbeOutcome, run_probe
from bisector.measure.program_output import echo
from bisector.job.probe import Probe
from bisector.measure.warm_pool import WarmPool
from bisector.process.procs import SHUTDOWN, Interrupted

GpuSlot = Callable[[], ContextManager[Optional[str]]]  # held around the probe run: CUDA_VISIBLE_DEVICES or None


class Proved(BaseModel):
    """What the environment's health check proved it holds: the candidate's installed version (and,
    for a commit, the revision stamped into its wheel) and the base's packages (torch's version)."""

    model_config = ConfigDict(frozen=True)

    version: str
    revision: Optional[str] = None
    provided: dict[str, str] = {}


class TakeJob(BaseModel):
    """One measurement to take: the stored row it will become (``base``: key, candidate, fingerprints,
    repeat), the recipe the driver computed, the probe, and the device facts the probe is given."""

    model_config = ConfigDict(frozen=True)

    base: Measurement
    recipe: Recipe
    probe: Probe
    device: str = "cpu"
    cpus: int = 1
    label: str = ""  # how live progress names it ("accelerate 0.22.0")


def check_shutdown() -> None:
    """Never record a measurement cut short by Ctrl-C / SIGTERM."""
    if SHUTDOWN.is_set():
        raise Interrupted()


@contextlib.contextmanager
def no_gpu() -> ContextManager[Optional[str]]:
    """The GPU slot of a CPU-only probe run."""
    yield None


def proved(env: Environment) -> Proved:
    """The versions the health check of ``env`` proved."""
    info = env.info
    return Proved(version=info.installed_version, revision=info.installed_revision, provided=dict(info.provided))


def take_measurement(envs: EnvManager, job: TakeJob, gpu_slot: GpuSlot = no_gpu, recipe: Optional[Recipe] = None,
                     warm: Optional[WarmPool] = None) -> Measurement:
    """Build (or reuse) the environment of ``recipe`` (default: the job's) and run the probe (in a child
    of the environment's warm worker where ``warm`` has one for it); an environment failure is an
    ENV_FAILED measurement; nothing is returned if interrupted."""
    with activity.doing(job.label or f"{job.base.package} {job.base.candidate}", kind="measure"):
        return _take(envs, job, gpu_slot, recipe or job.recipe, warm)


def _take(envs: EnvManager, job: TakeJob, gpu_slot: GpuSlot, recipe: Recipe, warm: Optional[WarmPool]) -> Measurement:
    start = time.monotonic()
    base = job.base
    activity.update("environment")
    with contextlib.ExitStack() as held:
        try:  # held in use until the probe ends, so `envs gc` elsewhere cannot remove it
            env = held.enter_context(envs.using(recipe))
        except EnvironmentFailure as exc:
            check_shutdown()
            return base.model_copy(update={"status": Status.ENV_FAILED, "reason": str(exc),
                                           "seconds": time.monotonic() - start})
        env_seconds = time.monotonic() - start
        with tempfile.TemporaryDirectory(prefix="bisector-proof-") as tmp:
            proof = Path(tmp) / "proof.jsonl"
            outcome = _run(job, env, gpu_slot, _proof_vars(env, proof), warm)
            try:
                env = envs.settle_health(env, recipe, _proof(env, recipe, proof))
            except EnvironmentFailure as exc:
                check_shutdown()
                return base.model_copy(update={"status": Status.ENV_FAILED, "reason": str(exc), "env": env_facts(env),
                                               "seconds": time.monotonic() - start})
    details = {**outcome.details(), "env_seconds": round(env_seconds, 3), "probe_seconds": round(outcome.seconds, 3),
               "proved": proved(env).model_dump()}
    return base.model_copy(update={"status": outcome.status, "metrics": outcome.metrics, "details": details,
                                   "result": outcome.result, "env": env_facts(env),
                                   "exit_code": outcome.exit_code, "reason": outcome.reason,
                                   "seconds": time.monotonic() - start})


def env_facts(env: Environment) -> EnvFacts:
    """The environment as this measurement used it (its record and its package's METADATA, read now:
    nothing reads them again after the measurement, and on a Ray node they are that node's)."""
    info = env.info
    packages = {**dict(r.split("==", 1) for r in info.resolved if "==" in r), **info.provided,
                **({"torch": info.torch} if info.torch else {})}
    return EnvFacts(path=str(env.path), python=info.python_version, packages=packages, torch=info.torch,
                    torch_from=info.torch_from, torch_git=info.torch_git,
                    repository_url=repository_url(Path(env.path), info.dist_info))


def _proof_vars(env: Environment, path: Path) -> dict[str, str]:
    """For an env checked only from disk: the variables that make the probe's processes record their imports."""
    return proof_env(path, env.info.import_names) if env.info.health == "static" else {}


def _proof(env: Environment, recipe: Recipe, path: Path) -> Optional[list[str]]:
    """What the probe's imports prove (see bisector.envs.check.proof.proof_problems); None without a proof."""
    if env.info.health != "static":
        return []
    site = site_packages(env.path)
    static = static_report(Path(env.path) / env.info.dist_info, recipe.target,   # (absolute in the base)
                           homes_of(env.path, site, recipe.target_in_base, recipe.base), recipe.base)
    return proof_problems(read_proof(path), static, recipe.target, site, recipe.base)


def probe_environment(job: TakeJob, env: Environment) -> dict[str, str]:
    """The variables the job's probe runs under in ``env`` (a run adds its result file, proof and GPU)."""
    return {**env.run_env(), "BISECTOR_PACKAGE": job.base.package, "BISECTOR_CANDIDATE": job.base.candidate,
            "BISECTOR_DEVICE": job.device, "BISECTOR_CPUS": str(max(1, job.cpus)), USER_PATH_ENV: user_path()}


USER_PATH_ENV = "BISECTOR_USER_PATH"


def user_path() -> str:
    """Where a user's own modules are (``--model-factory MODULE:FUNCTION``): the directory bisector was
    started in and the user's PYTHONPATH, which the environment itself clears; a probe searches them
    after the environment's own paths."""
    entries = [os.getcwd(), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    return os.pathsep.join(dict.fromkeys(os.path.abspath(e) for e in entries if e))


def warm_identity(env: Environment) -> str:
    """Which build of an environment a warm worker imported from (a rebuilt one gets a new worker)."""
    return f"{env.path}@{env.info.created.isoformat()}"


def _run(job: TakeJob, env: Environment, gpu_slot: GpuSlot, extra: Optional[dict[str, str]] = None,
         warm: Optional[WarmPool] = None) -> ProbeOutcome:
    probe_env = {**probe_environment(job, env), **job.probe.env, **(extra or {})}
    with gpu_slot() as gpu:  # one probe per GPU; environments build without holding one
        if gpu is not None:
            probe_env["CUDA_VISIBLE_DEVICES"] = gpu
        activity.update("probe")
        outcome = run_probe(job.probe, env.python, probe_env, on_line=activity.line_updater(),
                            on_output=echo(job.label or job.base.candidate),
                            warm=warm.bound(warm_identity(env)) if warm else None)
    check_shutdown()
    return outcome
