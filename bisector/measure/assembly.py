"""The measuring engine, assembled in one place for every command (run, matrix, diff, probe and the
follow-ups of each): the store, the environment cache, this machine's GPUs, the executor (``local``
threads and the GpuPool, or ``ray``: bisector.measure.ray_executor, loaded only when asked for, as Ray
is optional: put ``ray>=2.40`` next to bisector, bisector.sources.install_route) and the cores one probe may use.

Whatever a command measures goes through :meth:`Engine.measurers` or :meth:`Engine.measurer`, so a
diff measures on the GPUs a bisect would, and a diff's ``--follow`` bisect judges on the same engine.
"""
from __future__ import annotations

import atexit
import importlib
import importlib.util
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Protocol

from bisector.envs import EnvManager, EnvSpec
from bisector.errors import UsageError
from bisector.sources.install_route import next_to_bisector
from bisector.job.config import ExecutorKind
from bisector.measure.executors import Executor, LocalExecutor
from bisector.measure.gpus import Gpu, GpuPool, detect_gpus, probe_cpus
from bisector.measure.measurer import Measurer
from bisector.measure.measurers import Measurers
from bisector.job.probe import Probe
from bisector.paths import default_cache_dir
from bisector.store.storage import Store

RAY_CONNECT_S = 5.0
RAY = "ray>=2.40"   # pyproject's optional extra [ray]


def ray_missing() -> str:
    """The one line when Ray is not installed: the command that puts it next to bisector on its route."""
    how = next_to_bisector(RAY)
    return f"--executor ray needs Ray, which is not installed here: {how}" if how else \
        f"--executor ray needs Ray, which is not installed here: install {RAY} next to bisector"


class EngineSettings(Protocol):
    """What the engine is built from: a run's ``[run]`` table (bisector.job.config.RunSection)."""

    jobs: int
    prefetch: Optional[bool]
    cache_dir: Optional[Path]
    env_backend: Optional[str]
    executor: ExecutorKind
    ray_address: Optional[str]
    warm: bool


RAY_HOST_PORT = re.compile(r"(?:ray://)?[^\s:]+:[0-9]{1,5}|(?:ray://)?\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}")


def check_executor(kind: ExecutorKind, address: Optional[str] = None) -> None:
    """A usage error (one line, before any work) when the executor asked for cannot run here, or the Ray
    cluster named by ``address`` (HOST:PORT, ray://HOST:PORT) does not answer within a few seconds (Ray
    itself would keep trying for minutes, deaf to SIGTERM)."""
    if kind is not ExecutorKind.RAY:
        return
    if importlib.util.find_spec("ray") is None:
        raise UsageError(ray_missing())
    if address == "auto":
        address = _auto_address()
    if address in (None, "auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_S).close()
    except OSError as exc:
        raise UsageError(f"no Ray cluster answers at {address} ({exc.strerror or exc}); start one with `ray start "
                         "--head`, or name the running one") from None


def _auto_address() -> Optional[str]:
    """The cluster ``--ray-address auto`` joins, found as Ray finds it (RAY_ADDRESS, the address the last
    `ray start` left, a running cluster's processes); a usage error when there is none, rather than
    Ray's own failure after the store is made. None when Ray's lookup cannot be asked (left to Ray)."""
    try:
        from ray._private.services import get_ray_address_from_environment
    except ImportError:
        return None
    try:
        found = get_ray_address_from_environment("auto", None)
    except ConnectionError:
        raise UsageError("--ray-address auto: no Ray cluster runs here (no `ray start` found, RAY_ADDRESS unset); "
                         "start one with `ray start --head`, name one (HOST:PORT), or leave --ray-address out "
                         "to start a local Ray") from None
    except Exception:   # noqa: BLE001 - Ray's private lookup changed: Ray itself will say
        return None
    return found if isinstance(found, str) and RAY_HOST_PORT.fullmatch(found) else None


def probe_device(kind: ExecutorKind, gpus: list[Gpu]) -> str:
    """The device a built-in probe's preflight checks its arguments for: this machine's (``gpus``, as
    :func:`bisector.measure.gpus.detect_gpus` found them; a cluster's nodes are not this machine, so there it
    checks the arguments, not the memory)."""
    return "cuda" if kind is ExecutorKind.RAY else GpuPool(gpus).device


def make_executor(kind: ExecutorKind, envs: EnvManager, gpus: GpuPool,
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


@dataclass
class Engine:
    """One command's measuring engine (see the module)."""

    store: Store
    envs: EnvManager
    pool: GpuPool
    executor: Executor
    jobs: int = 1
    taken: dict[Optional[str], set[str]] = field(default_factory=dict)   # run id -> the measurements it took

    @property
    def cpus(self) -> int:
        """Cores one probe may use: the machine's cores shared by the probes at once (1 on a cluster,
        whose nodes decide for themselves)."""
        return probe_cpus(self.jobs, self.pool.gpus) if self.executor.builds_here else 1

    def measurers(self, spec: EnvSpec, probe: Probe, index_url: Optional[str] = None) -> Measurers:
        """The factory of a bisect's per-phase measurers over ``spec`` and ``probe``."""
        return Measurers(self.store, self.envs, spec, probe, self.executor, index_url=index_url, cpus=self.cpus,
                         taken=self.taken)

    def measurer(self, spec: EnvSpec, probe: Probe, index_url: Optional[str] = None,
                 run_id: Optional[str] = None, repo_path: Optional[Path] = None) -> Measurer:
        """One measurer over ``spec`` and ``probe`` (a matrix cell's, a diff setup's, ``bisector probe``'s)."""
        return self.measurers(spec, probe, index_url)(run_id, repo_path)


def build_engine(run: EngineSettings, store: Store, max_gpus: Optional[int] = None,
                 gpus: Optional[list[Gpu]] = None) -> Engine:
    """The engine of a run: its cache dir's environments, this machine's GPUs (``gpus``, as the command's
    preflight found them, else found now; ``max_gpus`` of them: ``bisector probe`` runs one probe on exactly
    one), and the run's executor."""
    check_executor(run.executor)
    # torch bases are built ahead only with an explicit --prefetch (each is gigabytes)
    envs = EnvManager(run.cache_dir or default_cache_dir(), backend=run.env_backend, defer_health=True,
                      prefetch_bases=run.prefetch is True)
    gpus = detect_gpus() if gpus is None else gpus
    pool = GpuPool(gpus[:max_gpus] if max_gpus is not None else gpus)
    executor = make_executor(run.executor, envs, pool, run.ray_address, run.cache_dir, warm=run.warm)
    return Engine(store=store, envs=envs, pool=pool, executor=executor, jobs=max(1, run.jobs))
