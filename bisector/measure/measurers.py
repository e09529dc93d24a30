"""The factory of a job's per-phase measurers: one store, environment manager, spec, probe, GPU pool and
executor; its variants lay pins over the spec, change the probe, or take nightly candidates from a
nightly index."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from bisector.envs import EnvManager, EnvSpec
from bisector.measure.executors import Executor, LocalExecutor
from bisector.measure.gpus import GpuPool
from bisector.measure.measurer import Measurer
from bisector.measure.nightly_env import NightlyIndex
from bisector.measure.probe_spec import ProbeSpec
from bisector.store.storage import Store


class Measurers:
    """Makes the :class:`Measurer` of each bisect phase of one job: one store, environment manager,
    spec, probe, GPU pool and executor (what the driver is handed; tests hand it a fake instead)."""

    def __init__(self, store: Store, envs: EnvManager, spec: EnvSpec, probe: ProbeSpec,
                 index_url: Optional[str] = None, gpus: Optional[GpuPool] = None, cpus: int = 1,
                 executor: Optional[Executor] = None, tag: str = "", nightly: Optional[NightlyIndex] = None):
        self.store, self.envs, self.spec, self.probe, self.index_url = store, envs, spec, probe, index_url
        self.pool = gpus or GpuPool([])
        self.cpus = cpus
        self.executor: Executor = executor or LocalExecutor(envs, self.pool)
        self.tag = tag
        self.nightly = nightly

    @property
    def gpus(self) -> list[str]:
        """The GPU ids probes run on (one probe each)."""
        return self.pool.gpus

    @property
    def slots(self) -> int:
        """Measurements that can run at once (one per GPU, else per core; on Ray, the cluster's)."""
        return self.executor.slots

    @property
    def speculates(self) -> bool:
        """Whether spare slots measure the likely next midpoints (the ray executor's)."""
        return self.executor.speculates

    def with_probe_args(self, args: list[str]) -> "Measurers":
        """The same store, environments and GPUs, the probe run with ``args`` instead."""
        return self.with_probe(self.probe.model_copy(update={"args": list(args)}))

    def with_probe(self, probe: ProbeSpec) -> "Measurers":
        """The same store, environments and GPUs, running ``probe`` instead (a repro script, say)."""
        return Measurers(self.store, self.envs, self.spec, probe, self.index_url, self.pool, self.cpus,
                         self.executor, self.tag, self.nightly)

    def nightlies(self, index_url: str) -> "Measurers":
        """The same measurers, nightly candidates coming from the nightly index ``index_url``."""
        return Measurers(self.store, self.envs, self.spec, self.probe, self.index_url, self.pool, self.cpus,
                         self.executor, self.tag, NightlyIndex(index_url))

    def __call__(self, run_id: str, repo_path: Optional[Path] = None) -> Measurer:
        return Measurer(self.store, self.envs, self.spec, self.probe, repo_path=repo_path,
                        index_url=self.index_url, run_id=run_id, gpus=self.pool, cpus=self.cpus,
                        executor=self.executor, tag=self.tag, nightly=self.nightly)

    def pinned(self, pins: dict[str, str]) -> "Measurers":
        """The same measurers over this spec with ``pins`` (name -> exact version) laid over its companions
        (a torch pin sets the base): the environments of an attribution's trials."""
        exact = {name: f"=={version}" for name, version in pins.items()}
        tag = self.tag + "".join(f" + {name}=={version}" for name, version in pins.items())
        return Measurers(self.store, self.envs, self.spec.over(exact, self.index_url), self.probe,
                         self.index_url, self.pool, self.cpus, self.executor, tag, self.nightly)
