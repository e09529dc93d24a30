"""Measure a candidate: build (or reuse) its environment, run the probe, store the measurement.

A stored measurement with the same key (package, candidate, environment fingerprint, probe
fingerprint, repeat) is reused and no probe runs: this is what makes reruns free and resumes exact.
The recipe of a candidate's environment (which also gives its fingerprint) is computed once.
"""
from __future__ import annotations

import hashlib
import threading
from concurrent.futures import CancelledError
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bisector.console import activity
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.measurement import RETRIED_ON_RERUN, Measurement, Status, declare_units
from bisector.envs import EnvManager, EnvSpec, InstallTarget, Recipe
from bisector.errors import EnvironmentFailure
from bisector.measure.executors import Executor, Handle
from bisector.measure.gpus import cuda_runtime
from bisector.measure.nightly_env import NightlyIndex, nightly_fingerprint
from bisector.job.probe import Probe
from bisector.measure.take import TakeJob, check_shutdown
from bisector.process.procs import SHUTDOWN, Interrupted
from bisector.store.storage import Store

WAIT_POLL_S = 0.1


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

    def __init__(self, store: Store, envs: EnvManager, spec: EnvSpec, probe: Probe, executor: Executor,
                 repo_path: Optional[Path] = None, index_url: Optional[str] = None, run_id: Optional[str] = None,
                 cpus: int = 1, tag: str = "", taken: Optional[set[str]] = None, nightly: Optional[NightlyIndex] = None):
        self.store, self.envs, self.spec, self.probe = store, envs, spec, probe
        self.nightly = nightly   # where nightly candidates come from (bisector.measure.nightly_env)
        self.tag = tag   # how progress tells this measurer's environments from the plain ones (" + pins")
        self.repo_path, self.index_url, self.run_id = repo_path, index_url, run_id
        self.probe_fp = probe.fingerprint()
        self.cpus = max(1, cpus)
        self._meter: Optional[str] = None  # the meter of this measurer's first measurement
        self.probes_run = 0
        self.reused_keys: set[str] = set()
        self._recipes: dict[InstallTarget, Recipe] = {}
        self._lock = threading.RLock()
        self.executor = executor
        self._inflight: dict[str, Handle] = {}      # measurements on their way, by key
        self._speculative: dict[str, Handle] = {}   # of those, the ones no phase asked for yet
        # keys this run took (shared by the run's measurers): read back, they are not reused
        self._taken: set[str] = taken if taken is not None else set()

    @property
    def exit_code_mode(self) -> bool:
        """The probe is judged by its exit code."""
        return self.probe.judged_by_exit_code

    def bad_input(self, m: Measurement) -> Optional[str]:
        """What the probe's kind says ``m`` shows about the job's settings (bad input), else None."""
        return self.probe.bad_input(m)

    def target(self, c: Candidate) -> InstallTarget:
        """What the environment manager installs for a candidate."""
        if c.kind is CandidateKind.RELEASE:
            return InstallTarget(package=c.package, version=c.ref, as_of=c.date, index_url=self.index_url)
        if c.kind is CandidateKind.NIGHTLY:
            return InstallTarget(package=c.package, version=c.ref, as_of=c.date,
                                 index_url=self.nightly.url if self.nightly else self.index_url)
        return InstallTarget(package=c.package, source=self.repo_path, revision=c.ref, as_of=c.date,
                             index_url=self.index_url, revert=c.revert)

    def key(self, c: Candidate, env_fp: str, repeat: int, recipe: Optional[Recipe] = None) -> str:
        """The store key of repeat ``repeat`` of ``c`` in the environment ``env_fp``: on CUDA it also
        holds the GPUs' identity (model, memory, driver: the executor's kind) and the CUDA runtime of
        the environment's torch, so a store shared by machines never hands one GPU's bytes to another."""
        parts = [c.package, c.kind.value, c.ref, env_fp, self.probe_fp, str(repeat), self.executor.kind]
        if self.executor.device == "cuda" and c.kind is not CandidateKind.NIGHTLY:   # a nightly's label names it
            parts.append("cuda runtime " + (cuda_runtime(recipe.base.provided) if recipe else "unknown"))
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]

    def _recipe(self, target: InstallTarget, spec: Optional[EnvSpec] = None) -> Recipe:
        """The environment's recipe, computed once per target (a torch candidate's may build its base)."""
        with self._lock:
            found = self._recipes.get(target)
        if found is None:
            found = self.envs.recipe(spec or self.spec, target)
            with self._lock:
                self._recipes[target] = found
        return found

    def _address(self, c: Candidate, repeat: int) -> _Address:
        target = self.target(c)
        if c.kind is CandidateKind.NIGHTLY:
            return self._nightly_address(c, target, repeat)
        try:
            recipe = self._recipe(target)
        except EnvironmentFailure as exc:
            check_shutdown()
            digest = hashlib.sha256(target.model_dump_json().encode()).hexdigest()[:16]
            env_fp = f"unbuilt-{digest}"
            return _Address(target, None, env_fp, self.key(c, env_fp, repeat), str(exc))
        return _Address(target, recipe, recipe.fingerprint, self.key(c, recipe.fingerprint, repeat, recipe))

    def _nightly_address(self, c: Candidate, target: InstallTarget, repeat: int) -> _Address:
        """A nightly's address: its key needs neither the index nor its base (a stored measurement is
        found without them); its recipe is made only when it is to be measured, after the day's checks."""
        env_fp = nightly_fingerprint(self.spec, c)
        key = self.key(c, env_fp, repeat)
        if self._reusable(key) is not None:
            return _Address(target, None, env_fp, key)
        spec, problem = self.nightly.spec_for(self.spec, c) if self.nightly else (self.spec, "no nightly index given")
        if problem is None:
            try:
                return _Address(target, self._recipe(target, spec), env_fp, key)
            except EnvironmentFailure as exc:
                check_shutdown()
                problem = str(exc)
        return _Address(target, None, env_fp, key, problem)

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
        """Reuse the stored measurement or take a new one through the executor (a measurement already
        on its way, a speculative one say, is waited for, not taken twice)."""
        address = self._address(c, repeat)
        with self._lock:
            handle = self._inflight.get(address.key)
            if handle is None:
                found = self._reusable(address.key)
                if found is not None:
                    if found.key in self._taken:
                        return found
                    self.reused_keys.add(found.key)
                    return found.model_copy(update={"reused": True})
                if address.recipe is None:
                    return self._store(self._base(c, address, repeat).model_copy(
                        update={"status": Status.ENV_FAILED, "reason": address.problem}))
                handle = self._submit(c, address, repeat, speculative=False)
            else:  # adopted: no longer speculative, never cancelled as such
                handle.speculative = False
                self._speculative.pop(address.key, None)
        if self.executor.builds_here:  # the executor's thread shows its own progress
            return self._wait(handle)
        with activity.doing(handle.job.label, kind="measure"):
            activity.update("on a cluster node")
            return self._wait(handle)

    def _base(self, c: Candidate, address: _Address, repeat: int) -> Measurement:
        return Measurement(key=address.key, package=c.package, candidate=c.ref,
                           env_fingerprint=address.env_fingerprint, probe_fingerprint=self.probe_fp,
                           repeat=repeat, run_id=self.run_id, status=Status.RUNNING, seconds=0.0)

    def warm(self, samples: list[tuple[Candidate, int]]) -> None:
        """Ready, together, what the next of these (candidate, repeat) samples run in (their environments
        and warm workers), so interleaved samples each cost a fork; stored samples need nothing."""
        jobs = []
        for c, repeat in samples:
            address = self._address(c, repeat)
            if address.recipe is not None and address.key not in self._inflight and not self._reusable(address.key):
                jobs.append(self._job(c, address, repeat))
        if jobs:
            self.executor.prewarm(jobs)

    def _job(self, c: Candidate, address: _Address, repeat: int) -> TakeJob:
        return TakeJob(base=self._base(c, address, repeat), recipe=address.recipe, probe=self.probe,
                       device=self.executor.device, cpus=self.cpus, label=f"{c.package} {c.short}{self.tag}")

    def _submit(self, c: Candidate, address: _Address, repeat: int, speculative: bool) -> Handle:
        """Hand the measurement to the executor (called holding the lock)."""
        job = self._job(c, address, repeat)
        handle = self.executor.submit(job, self._arrived, speculative=speculative)
        self._inflight[address.key] = handle
        handle.future.add_done_callback(lambda _: self._forget(handle))
        return handle

    def _arrived(self, m: Measurement) -> Measurement:
        """A taken measurement, the moment it returns: checked for its device, stored, counted."""
        m = self._same_device(m)
        declare_units(m)   # (one that travelled from a Ray node was never validated here)
        self._store(m)
        with self._lock:
            self._taken.add(m.key)
            if m.status not in (Status.ENV_FAILED, Status.LOST):
                self.probes_run += 1
        return m

    def _store(self, m: Measurement) -> Measurement:
        self.store.put_measurement(m)
        return m

    def _forget(self, handle: Handle) -> None:
        with self._lock:
            if self._inflight.get(handle.key) is handle:
                del self._inflight[handle.key]
            if self._speculative.get(handle.key) is handle:
                del self._speculative[handle.key]

    def _wait(self, handle: Handle) -> Measurement:
        """The handle's measurement; on Ctrl-C / SIGTERM its task is cancelled and nothing is recorded."""
        while not self.executor.wait_any([handle], timeout=WAIT_POLL_S):
            if SHUTDOWN.is_set():
                self.executor.cancel(handle)
                raise Interrupted()
        try:
            return handle.result()
        except CancelledError:
            raise Interrupted() from None

    def _same_device(self, m: Measurement) -> Measurement:
        """A result measured on another device, or with another meter than this measurer's first,
        is a SKIP: CPU bytes are never compared with CUDA bytes."""
        result = m.result
        if m.status is not Status.OK or not result:
            return m
        ran_on, meter = result.device.type, result.meter
        problem = None
        if ran_on and ran_on != self.executor.device:
            problem = f"the probe ran on {ran_on}, the run measures on {self.executor.device}"
        elif ran_on == "cuda":
            problem = _other_gpu(result.device.name, self.executor.gpu_names)
        with self._lock:
            if meter and self._meter is None:
                self._meter = meter
            if not problem and meter and meter != self._meter:
                problem = f"the probe measured with meter {meter}, the run with {self._meter}"
        if not problem:
            return m
        return m.model_copy(update={"status": Status.WRONG_DEVICE, "metrics": {}, "reason": problem})

    def speculate(self, needed: list[Candidate], likely: list[Candidate]) -> None:
        """Measure ``likely`` next candidates (their first repeat) on spare slots, when the executor
        probes ahead; speculative tasks for candidates neither needed now nor likely are cancelled
        (one that already returned is stored for reuse, never lost)."""
        if not self.executor.speculates:
            return
        addresses = [self._address(c, 0) for c in likely]
        keep = {self._address(c, 0).key for c in needed} | {a.key for a in addresses}
        with self._lock:
            stale = [h for key, h in self._speculative.items() if key not in keep]
            for h in stale:
                del self._speculative[h.key]
                self._inflight.pop(h.key, None)
            for c, address in zip(likely, addresses):
                if address.recipe is None or address.key in self._inflight or self._reusable(address.key):
                    continue
                self._speculative[address.key] = self._submit(c, address, 0, speculative=True)
        for h in stale:
            self.executor.cancel(h)

    def prefetch(self, candidates: list[Candidate]) -> None:
        """Build the environments of candidates that may be probed next, in the background, in place of
        what was asked for before (none: the builds still queued are dropped); here only: on a cluster
        each node builds its own."""
        if self.executor.builds_here:
            self.envs.prefetch(self.spec, [self.target(c) for c in candidates], recipe=self._recipe)


def _same_name(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def _other_gpu(name: Optional[str], names: frozenset[str]) -> Optional[str]:
    """Why a CUDA result is not from the GPU model its store key names (None when it is, or either
    side does not know)."""
    if not name or not names or any(_same_name(name, n) for n in names):
        return None
    return f"the probe ran on {name}, the store key names {' or '.join(sorted(names))}"
