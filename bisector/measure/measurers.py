"""The factory of a job's per-phase measurers: one store, environment manager, spec, probe and executor;
its variants lay pins over the spec, change the probe, or take nightly candidates from a nightly index."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from bisector.envs import EnvManager, EnvSpec
from bisector.job.probe import Probe
from bisector.measure.executors import Executor
from bisector.measure.measurer import Measurer
from bisector.measure.nightly_env import NightlyIndex
from bisector.store.storage import Store


class Measurers:
    """Makes the :class:`Measurer` of each bisect phase of one job: one store, environment manager,
    spec, probe, GPU pool and executor (what the driver is handed; tests hand it a fake instead)."""

    def __init__(self, store: Store, envs: EnvManager, spec: EnvSpec, probe: Probe, executor: Executor,
                 index_url: Optional[str] = None, cpus: int = 1, tag: str = "",
                 taken: Optional[dict[Optional[str], set[str]]] = None, nightly: Optional[NightlyIndex] = None):
        self.store, self.envs, self.spec, self.probe, self.index_url = store, envs, spec, probe, index_url
        self.cpus = cpus
        self.executor = executor
        self.tag = tag
        self._taken = taken if taken is not None else {}   # run id -> the keys that run took
        self.nightly = nightly   # where nightly candidates come from (its pages read once)

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

    def with_probe(self, probe: Probe) -> "Measurers":
        """The same store, environments and GPUs, running ``probe`` instead (a repro script, say)."""
        return Measurers(self.store, self.envs, self.spec, probe, self.executor, self.index_url, self.cpus,
                         self.tag, self._taken, self.nightly)

    def nightlies(self, index_url: str) -> "Measurers":
        """The same measurers, nightly candidates coming from the nightly index ``index_url``."""
        return Measurers(self.store, self.envs, self.spec, self.probe, self.executor, self.index_url, self.cpus,
                         self.tag, self._taken, NightlyIndex(index_url))

    def __call__(self, run_id: Optional[str], repo_path: Optional[Path] = None) -> Measurer:
        return Measurer(self.store, self.envs, self.spec, self.probe, self.executor, repo_path=repo_path,
                        index_url=self.index_url, run_id=run_id, cpus=self.cpus, tag=self.tag,
                        taken=self._taken.setdefault(run_id, set()), nightly=self.nightly)

    def pinned(self, pins: dict[str, str]) -> "Measurers":
        """The same measurers over this spec with ``pins`` (name -> exact version) laid over its companions
        (a torch pin sets the base): the environments of an attribution's trials."""
        exact = {name: f"=={version}" for name, version in pins.items()}
        tag = self.tag + "".join(f" + {name}=={version}" for name, version in pins.items())
        return Measurers(self.store, self.envs, self.spec.over(exact, self.index_url), self.probe,
                         self.executor, self.index_url, self.cpus, tag, self._taken, self.nightly)
