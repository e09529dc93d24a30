"""Measure a candidate: build (or reuse) its environment, run the probe, store the measurement.

A stored measurement with the same key (package, candidate, environment fingerprint, probe
fingerprint, repeat) is reused and no probe runs: this is what makes reruns free and resumes exact.
The recipe of a candidate's environment (which also gives its fingerprint) is computed once.
"""
from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bisector import activity
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.measurement import RETRIED_ON_RERUN, Measurement, Status
from bisector.envs import Environment, EnvManager, EnvSpec, InstallTarget, Recipe
from bisector.errors import EnvironmentFailure
from bisector.measure.execute import ProbeOutcome, run_probe
from bisector.measure.gpus import GpuPool
from bisector.measure.spec import ProbeSpec
from bisector.procs import SHUTDOWN, Interrupted
from bisector.storage import Store


def _check_shutdown() -> None:
    """Never record a measurement cut short by Ctrl-C / SIGTERM."""
    if SHUTDOWN.is_set():
        raise Interrupted()


@dataclass(frozen=True)
class _Address:
    """Where a measurement lives: its environment's recipe (None when it cannot even be described,
    with ``problem`` saying why), the environment fingerprint and the store key."""

    target: InstallTarget
    recipe: Optional[Recipe]
    env_fingerprint: str
    key: str
    problem: Optional[str] = None


class Measurer:
    """Runs and stores measurements for one job (package, environment spec, probe)."""

    def __init__(self, store: Store, envs: EnvManager, spec: EnvSpec, probe: ProbeSpec,
                 repo_path: Optional[Path] = None, index_url: Optional[str] = None, run_id: Optional[str] = None,
                 gpus: Optional[GpuPool] = None, cpus: int = 1):
        self.store, self.envs, self.spec, self.probe = store, envs, spec, probe
        self.repo_path, self.index_url, self.run_id = repo_path, index_url, run_id
        self.probe_fp = probe.fingerprint()
        self.gpus = gpus or GpuPool([])
        self.cpus = max(1, cpus)
        self._meter: Optional[str] = None  # the meter of this measurer's first measurement
        self.probes_run = 0
        self.reused_keys: set[str] = set()
        self._recipes: dict[InstallTarget, Recipe] = {}
        self._lock = threading.Lock()

    @property
    def exit_code_mode(self) -> bool:
        """The probe is judged by its exit code."""
        return self.probe.exit_code_mode

    def target(self, c: Candidate) -> InstallTarget:
        """What the environment manager installs for a candidate."""
        if c.kind is CandidateKind.RELEASE:
            return InstallTarget(package=c.package, version=c.ref, as_of=c.date, index_url=self.index_url)
        return InstallTarget(package=c.package, source=self.repo_path, revision=c.ref, as_of=c.date,
                             index_url=self.index_url, revert=c.revert)

    def key(self, c: Candidate, env_fp: str, repeat: int) -> str:
        """The store key of repeat ``repeat`` of ``c`` in the environment ``env_fp``."""
        raw = "\0".join([c.package, c.kind.value, c.ref, env_fp, self.probe_fp, str(repeat), self.gpus.kind])
        return hashlib.sha256(raw.encode()).hexdigest()[:32]

    def _recipe(self, target: InstallTarget) -> Recipe:
        """The environment's recipe, computed once per target (a torch candidate's may build its base)."""
        with self._lock:
            found = self._recipes.get(target)
        if found is None:
            found = self.envs.recipe(self.spec, target)
            with self._lock:
                self._recipes[target] = found
        return found

    def _address(self, c: Candidate, repeat: int) -> _Address:
        target = self.target(c)
        try:
            recipe = self._recipe(target)
        except EnvironmentFailure as exc:
            _check_shutdown()
            digest = hashlib.sha256(target.model_dump_json().encode()).hexdigest()[:16]
            env_fp = f"unbuilt-{digest}"
            return _Address(target, None, env_fp, self.key(c, env_fp, repeat), str(exc))
        return _Address(target, recipe, recipe.fingerprint, self.key(c, recipe.fingerprint, repeat))

    def stored(self, c: Candidate, repeat: int) -> Optional[Measurement]:
        """The stored measurement for this candidate and repeat, if one can be reused."""
        return self._reusable(self._address(c, repeat).key)

    def next_repeat(self, c: Candidate) -> int:
        """The first repeat number of ``c`` with nothing stored (a fresh measurement keeps the others)."""
        repeat = 0
        while self.store.get_measurement(self._address(c, repeat).key) is not None:
            repeat += 1
        return repeat

    def _reusable(self, key: str) -> Optional[Measurement]:
        found = self.store.get_measurement(key)
        return found if found and found.status not in RETRIED_ON_RERUN else None

    def measure(self, c: Candidate, repeat: int = 0) -> Measurement:
        """Reuse the stored measurement or take a new one (environment failures become a stored SKIP)."""
        address = self._address(c, repeat)
        found = self._reusable(address.key)
        if found is not None:
            with self._lock:
                self.reused_keys.add(found.key)
            return found
        base = Measurement(key=address.key, package=c.package, candidate=c.ref,
                           env_fingerprint=address.env_fingerprint, probe_fingerprint=self.probe_fp,
                           repeat=repeat, run_id=self.run_id, status=Status.RUNNING, seconds=0.0)
        if address.recipe is None:
            m = base.model_copy(update={"status": Status.ENV_FAILED, "reason": address.problem})
        else:
            m = self._take(c, address.recipe, base)
        self.store.put_measurement(m)
        return m

    def _take(self, c: Candidate, recipe: Recipe, base: Measurement) -> Measurement:
        """Build (or reuse) the environment and run the probe; nothing is returned if interrupted."""
        with activity.doing(f"{c.package} {c.short}", kind="measure"):
            return self._take_now(c, recipe, base)

    def _take_now(self, c: Candidate, recipe: Recipe, base: Measurement) -> Measurement:
        start = time.monotonic()
        activity.update("environment")
        with contextlib.ExitStack() as held:
            try:  # held in use until the probe ends, so `envs gc` elsewhere cannot remove it
                env = held.enter_context(self.envs.using(recipe))
            except EnvironmentFailure as exc:
                _check_shutdown()
                return base.model_copy(update={"status": Status.ENV_FAILED, "reason": str(exc),
                                               "seconds": time.monotonic() - start})
            env_seconds = time.monotonic() - start
            outcome = self._run_probe(c, env)
        with self._lock:
            self.probes_run += 1
        details = {**outcome.details(), "env_seconds": round(env_seconds, 3), "probe_seconds": round(outcome.seconds, 3),
                   "env_path": str(env.path)}
        return base.model_copy(update={"status": outcome.status, "metrics": outcome.metrics, "details": details,
                                       "exit_code": outcome.exit_code, "reason": outcome.reason,
                                       "seconds": time.monotonic() - start})

    def _run_probe(self, c: Candidate, env: Environment) -> ProbeOutcome:
        probe_env = {**env.run_env(), "BISECTOR_PACKAGE": c.package, "BISECTOR_CANDIDATE": c.ref,
                     "BISECTOR_DEVICE": self.gpus.device, "BISECTOR_CPUS": str(self.cpus)}
        with self.gpus.slot() as gpu:  # one probe per GPU; environments build without holding one
            if gpu is not None:
                probe_env["CUDA_VISIBLE_DEVICES"] = gpu.id
            activity.update("probe")
            outcome = run_probe(self.probe, env.python, probe_env, on_line=activity.line_updater())
        _check_shutdown()
        return self._same_device(outcome)

    def _same_device(self, outcome: ProbeOutcome) -> ProbeOutcome:
        """A result measured on another device, or with another meter than this measurer's first,
        is a SKIP: CPU bytes are never compared with CUDA bytes."""
        result = outcome.result
        if outcome.status is not Status.OK or result is None:
            return outcome
        ran_on = (result.device or {}).get("type")
        problem = None
        if ran_on and ran_on != self.gpus.device:
            problem = f"the probe ran on {ran_on}, the run measures on {self.gpus.device}"
        with self._lock:
            if result.meter and self._meter is None:
                self._meter = result.meter
            if not problem and result.meter and result.meter != self._meter:
                problem = f"the probe measured with meter {result.meter}, the run with {self._meter}"
        return outcome.wrong_device(problem) if problem else outcome

    def prefetch(self, candidates: list[Candidate]) -> None:
        """Build the environments of candidates that may be probed next, in the background."""
        if candidates:
            self.envs.prefetch(self.spec, [self.target(c) for c in candidates], recipe=self._recipe)


class Measurers:
    """Makes the :class:`Measurer` of each bisect phase of one job: one store, environment manager,
    spec, probe and GPU pool (what the driver is handed; tests hand it a fake instead)."""

    def __init__(self, store: Store, envs: EnvManager, spec: EnvSpec, probe: ProbeSpec,
                 index_url: Optional[str] = None, gpus: Optional[GpuPool] = None, cpus: int = 1):
        self.store, self.envs, self.spec, self.probe, self.index_url = store, envs, spec, probe, index_url
        self.pool = gpus or GpuPool([])
        self.cpus = cpus

    @property
    def gpus(self) -> list[str]:
        """The GPU ids probes run on (one probe each)."""
        return self.pool.gpus

    def with_probe_args(self, args: list[str]) -> "Measurers":
        """The same store, environments and GPUs, the probe run with ``args`` instead."""
        probe = self.probe.model_copy(update={"args": list(args)})
        return Measurers(self.store, self.envs, self.spec, probe, self.index_url, self.pool, self.cpus)

    def __call__(self, run_id: str, repo_path: Optional[Path] = None) -> Measurer:
        return Measurer(self.store, self.envs, self.spec, self.probe, repo_path=repo_path,
                        index_url=self.index_url, run_id=run_id, gpus=self.pool, cpus=self.cpus)

    def pinned(self, pins: dict[str, str]) -> "Measurers":
        """The same measurers over this spec with ``pins`` (name -> exact version) laid over its companions
        (a torch pin sets the base): the environments of an attribution's trials."""
        exact = {name: f"=={version}" for name, version in pins.items()}
        return Measurers(self.store, self.envs, self.spec.over(exact, self.index_url), self.probe,
                         self.index_url, self.pool, self.cpus)
