"""What one Ray task does on its node: take one measurement, environment build included, and hand
it back as JSON. Nothing here imports Ray (bisector.measure.ray_executor wraps it as the task).

The task carries everything it needs: the driver's recipe (the env spec, the candidate and the
fingerprint the run expects), the probe's files, the device facts. On the node the same
:class:`~bisector.envs.EnvManager` builds the environment in a node-local cache, over that node's
own base (its torch). A node whose environment would differ from the driver's (another torch, another
interpreter, other index settings) refuses to measure: the measurement is an ENV_FAILED SKIP saying
why, never a number taken in the wrong environment.
"""
from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from pathlib import Path
from typing import Iterator, Optional

from pydantic import BaseModel

from bisector.core.measurement import Measurement, Status
from bisector.envs import EnvManager, Recipe
from bisector.errors import EnvironmentFailure
from bisector.job.probe import Probe
from bisector.measure.take import Proved, TakeJob, take_measurement
from bisector.paths import default_cache_dir

NODE_CACHE_ENV = "BISECTOR_NODE_CACHE_DIR"  # set on a node (before `ray start`) to choose its cache



class ProbeFiles(BaseModel):
    """A probe's files as they travel with its tasks: relative path -> text, and the script to run."""

    files: dict[str, str] = {}
    script: Optional[str] = None


class TaskPayload(BaseModel):
    """One task's input: the job as the driver made it, and where the node keeps its cache."""

    job: TakeJob
    cache_dir: Optional[str] = None


class TaskResult(BaseModel):
    """One task's output: the measurement, the fingerprint of the environment the node used (None when
    it could not even describe one), what the health check proved, and where it ran."""

    measurement: Measurement
    fingerprint: Optional[str] = None
    proved: Optional[Proved] = None
    node: str = ""
    gpus: list[str] = []


def probe_files(probe: Probe) -> ProbeFiles:
    """The files ``probe`` runs (a built-in probe's own files and the contract, or a user's script)."""
    script = probe.script()
    if script is None:
        return ProbeFiles()
    files = probe.files()
    return ProbeFiles(files={label: path.read_text() for label, path in files},
                      script=next(label for label, path in files if path == script))


@contextlib.contextmanager
def materialized(probe: Probe, shipped: ProbeFiles) -> Iterator[Probe]:
    """The probe as it runs on this node: its shipped files written to a temporary directory."""
    if shipped.script is None:
        yield probe
        return
    with tempfile.TemporaryDirectory(prefix="bisector-task-") as tmp:
        for rel, text in shipped.files.items():
            path = Path(tmp, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        yield probe.relocated(Path(tmp, shipped.script))


@functools.lru_cache(maxsize=8)
def node_envs(cache_dir: Optional[str], backend: Optional[str]) -> EnvManager:
    """This node's environment manager (one per worker process and cache)."""
    root = os.environ.get(NODE_CACHE_ENV) or cache_dir or str(default_cache_dir())
    return EnvManager(Path(root), backend=backend, defer_health=True)


@contextlib.contextmanager
def _given(gpus: list[str]) -> Iterator[Optional[str]]:
    yield ",".join(gpus) if gpus else None


def take_on_node(payload_json: str, files_json: str, node: str, gpus: list[str]) -> str:
    """The task body: the measurement of the payload's job, taken on this node, as TaskResult JSON."""
    payload = TaskPayload.model_validate_json(payload_json)
    job, shipped = payload.job, ProbeFiles.model_validate_json(files_json)
    envs = node_envs(payload.cache_dir, job.recipe.backend)
    out = TaskResult(measurement=job.base, node=node, gpus=gpus)
    try:
        recipe = envs.recipe(job.recipe.spec, job.recipe.target)
    except EnvironmentFailure as exc:
        return _failed(out, f"node {node[:12]}: {exc}").model_dump_json()
    out.fingerprint = recipe.fingerprint
    if recipe.fingerprint != job.recipe.fingerprint:
        return _failed(out, mismatch(node, recipe, job.recipe)).model_dump_json()
    with materialized(job.probe, shipped) as probe:
        m = take_measurement(envs, job.model_copy(update={"probe": probe}), lambda: _given(gpus), recipe)
    out.measurement = m
    if m.detail("proved"):
        out.proved = Proved.model_validate(m.detail("proved"))
    return out.model_dump_json()


def _failed(out: TaskResult, reason: str) -> TaskResult:
    return out.model_copy(update={"measurement": out.measurement.model_copy(
        update={"status": Status.ENV_FAILED, "reason": reason, "seconds": 0.0})})


def mismatch(node: str, here: Recipe, wanted: Recipe) -> str:
    """Why a node's environment is not the run's: the base (torch, interpreter) that differs."""
    mine, theirs = here.base, wanted.base
    facts = []
    if mine.torch_version != theirs.torch_version:
        facts.append(f"torch {mine.torch_version} here, {theirs.torch_version} on the driver")
    if mine.python != theirs.python or mine.python_version != theirs.python_version:
        facts.append(f"python {mine.python} ({mine.python_version}) here, {theirs.python} ({theirs.python_version}) "
                     "on the driver")
    why = "; ".join(facts) or "the base or the installer settings differ"
    return (f"node {node[:12]} would build another environment than the run's (fingerprint {here.fingerprint} "
            f"!= {wanted.fingerprint}: {why})")
