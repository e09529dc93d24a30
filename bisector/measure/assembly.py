"""Which executor takes a run's measurements: ``local`` (threads and the GpuPool) or ``ray``
(bisector.measure.ray_executor, loaded only when asked for: Ray is the optional extra
``bisector[ray]``)."""
from __future__ import annotations

import atexit
import importlib
import importlib.util
from pathlib import Path
from typing import Optional

from bisector.envs import EnvManager
from bisector.errors import UsageError
from bisector.measure.executors import Executor, ExecutorKind, LocalExecutor
from bisector.measure.gpus import GpuPool

RAY_MISSING = "--executor ray needs Ray, which is not installed here: pip install 'bisector[ray]'"


def check_executor(kind: ExecutorKind) -> None:
    """A usage error (one line, before any work) when the executor asked for cannot run here."""
    if kind is ExecutorKind.RAY and importlib.util.find_spec("ray") is None:
        raise UsageError(RAY_MISSING)


def make_executor(kind: ExecutorKind, envs: EnvManager, gpus: Optional[GpuPool] = None,
                  ray_address: Optional[str] = None, cache_dir: Optional[Path] = None, warm: bool = True) -> Executor:
    """The executor of a run; a Ray one is closed (its tasks cancelled) when the process exits. ``warm``:
    the local executor runs built-in probes as forks of warm workers (bisector.measure.warm_pool).

    ``cache_dir``: the cache each Ray node builds environments in (its own disk, at this path,
    unless the node sets BISECTOR_NODE_CACHE_DIR); None: each node's default cache."""
    if kind is ExecutorKind.LOCAL:
        return LocalExecutor(envs, gpus, warm=warm)
    check_executor(kind)
    module = importlib.import_module("bisector.measure.ray_executor")  # imports Ray: only when asked for
    executor = module.RayExecutor(ray_address, cache_dir=str(cache_dir) if cache_dir else None)
    atexit.register(executor.close)
    return executor
