"""Which executor takes a run's measurements: ``local`` (threads and the GpuPool) or ``ray``
(bisector.measure.ray_executor, loaded only when asked for: Ray is the optional extra
``bisector[ray]``)."""
from __future__ import annotations

import atexit
import importlib
import importlib.util
import socket
from pathlib import Path
from typing import Optional

from bisector.envs import EnvManager
from bisector.errors import UsageError
from bisector.measure.executors import Executor, ExecutorKind, LocalExecutor
from bisector.measure.gpus import GpuPool, detect_gpus

RAY_CONNECT_S = 5.0
RAY_MISSING = "--executor ray needs Ray, which is not installed here: pip install 'bisector[ray]'"


def check_executor(kind: ExecutorKind, address: Optional[str] = None) -> None:
    """A usage error (one line, before any work) when the executor asked for cannot run here, or the Ray
    cluster named by ``address`` (HOST:PORT, ray://HOST:PORT) does not answer within a few seconds (Ray
    itself would keep trying for minutes, deaf to SIGTERM)."""
    if kind is not ExecutorKind.RAY:
        return
    if importlib.util.find_spec("ray") is None:
        raise UsageError(RAY_MISSING)
    if address in (None, "auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_S).close()
    except OSError as exc:
        raise UsageError(f"no Ray cluster answers at {address} ({exc.strerror or exc}); start one with `ray start "
                         "--head`, or name the running one") from None


def probe_device(kind: ExecutorKind) -> str:
    """The device a built-in probe's preflight checks its arguments for: this machine's (a cluster's nodes
    are not this machine, so there it checks the arguments, not the memory)."""
    return "cuda" if kind is ExecutorKind.RAY else GpuPool(detect_gpus()).device


def make_executor(kind: ExecutorKind, envs: EnvManager, gpus: Optional[GpuPool] = None,
                  ray_address: Optional[str] = None, cache_dir: Optional[Path] = None) -> Executor:
    """The executor of a run; a Ray one is closed (its tasks cancelled) when the process exits.

    ``cache_dir``: the cache each Ray node builds environments in (its own disk, at this path,
    unless the node sets BISECTOR_NODE_CACHE_DIR); None: each node's default cache."""
    if kind is ExecutorKind.LOCAL:
        return LocalExecutor(envs, gpus)
    check_executor(kind)
    module = importlib.import_module("bisector.measure.ray_executor")  # imports Ray: only when asked for
    executor = module.RayExecutor(ray_address, cache_dir=str(cache_dir) if cache_dir else None)
    atexit.register(executor.close)
    return executor
