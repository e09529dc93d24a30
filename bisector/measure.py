"""Measure a candidate: build (or reuse) its environment, run the probe, store the measurement.

A stored measurement with the same key (package, candidate, environment fingerprint, probe
fingerprint, repeat) is reused and no probe runs: this is what makes reruns free and resumes exact.
"""
from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from pathlib import Path
from typing import Optional

from .candidate import Candidate, CandidateKind
from .envs import Environment, EnvManager, EnvSpec, InstallTarget
from .errors import EnvironmentFailure
from .gpus import GpuPool
from .probe import ProbeSpec
from .procs import SHUTDOWN, Interrupted
from .runner import ProbeOutcome, run_probe
from .store import Measurement, Store

RETRIED_ON_RERUN = {"env-failed", "interrupted"}


def install_target(c: Candidate, repo_path: Optional[Path], index_url: Optional[str]) -> InstallTarget:
    """What the environment manager installs for a candidate."""
    if c.kind is CandidateKind.RELEASE:
        return InstallTarget(package=c.package, version=c.ref, as_of=c.date, index_url=index_url)
    return InstallTarget(package=c.package, source=repo_path, revision=c.ref, as_of=c.date, index_url=index_url)


def _check_shutdown() -> None:
    """Never record a measurement cut short by Ctrl-C / SIGTERM."""
    if SHUTDOWN.is_set():
        raise Interrupted()


class Measurer:
    """Runs and stores measurements for one job (package, environment spec, probe)."""

    def __init__(self, store: Store, envs: EnvManager, spec: EnvSpec, probe: ProbeSpec,
                 repo_path: Optional[Path] = None, index_url: Optional[str] = None, run_id: Optional[str] = None,
                 gpus: Optional[GpuPool] = None):
        self.store, self.envs, self.spec, self.probe = store, envs, spec, probe
        self.repo_path, self.index_url, self.run_id = repo_path, index_url, run_id
        self.probe_fp = probe.fingerprint()
        self.gpus = gpus or GpuPool([])
        self.probes_run = 0
        self.reused_keys: set[str] = set()
        self._lock = threading.Lock()

    def target(self, c: Candidate) -> InstallTarget:
        return install_target(c, self.repo_path, self.index_url)

    def key(self, c: Candidate, env_fp: str, repeat: int) -> str:
        raw = "\0".join([c.package, c.kind.value, c.ref, env_fp, self.probe_fp, str(repeat)])
        return hashlib.sha256(raw.encode()).hexdigest()[:32]

    def _address(self, c: Candidate, repeat: int) -> tuple[InstallTarget, str, str, Optional[str]]:
        """The install target, environment fingerprint, store key and, when the environment cannot
        even be described (a torch candidate whose base does not build), why."""
        target = self.target(c)
        try:
            env_fp, problem = self.envs.recipe(self.spec, target).fingerprint, None
        except EnvironmentFailure as exc:
            _check_shutdown()
            digest = hashlib.sha256(target.model_dump_json().encode()).hexdigest()[:16]
            env_fp, problem = f"unbuilt-{digest}", str(exc)
        return target, env_fp, self.key(c, env_fp, repeat), problem

    def stored(self, c: Candidate, repeat: int) -> Optional[Measurement]:
        """The stored measurement for this candidate and repeat, if one can be reused."""
        return self._reusable(self._address(c, repeat)[2])

    def _reusable(self, key: str) -> Optional[Measurement]:
        found = self.store.get_measurement(key)
        return found if found and found.status not in RETRIED_ON_RERUN else None

    def measure(self, c: Candidate, repeat: int = 0) -> Measurement:
        """Reuse the stored measurement or take a new one (environment failures become a stored SKIP)."""
        target, env_fp, key, problem = self._address(c, repeat)
        found = self._reusable(key)
        if found is not None:
            with self._lock:
                self.reused_keys.add(found.key)
            return found
        base = Measurement(key=key, package=c.package, candidate=c.ref, env_fingerprint=env_fp,
                           probe_fingerprint=self.probe_fp, repeat=repeat, run_id=self.run_id,
                           status="running", seconds=0.0)
        if problem is not None:
            m = base.model_copy(update={"status": "env-failed", "reason": problem})
        else:
            m = self._take(c, target, base)
        self.store.put_measurement(m)
        return m

    def _take(self, c: Candidate, target: InstallTarget, base: Measurement) -> Measurement:
        """Build (or reuse) the environment and run the probe; nothing is returned if interrupted."""
        start = time.monotonic()
        with contextlib.ExitStack() as held:
            try:  # held in use until the probe ends, so `envs gc` elsewhere cannot remove it
                env = held.enter_context(self.envs.using(self.spec, target))
            except EnvironmentFailure as exc:
                _check_shutdown()
                return base.model_copy(update={"status": "env-failed", "reason": str(exc),
                                               "seconds": time.monotonic() - start})
            env_seconds = time.monotonic() - start
            outcome = self._run_probe(c, env)
        with self._lock:
            self.probes_run += 1
        details = {**outcome.details(), "env_seconds": round(env_seconds, 3), "env_path": str(env.path)}
        return base.model_copy(update={"status": outcome.status, "metrics": outcome.metrics, "details": details,
                                       "exit_code": outcome.exit_code, "reason": outcome.reason,
                                       "seconds": time.monotonic() - start})

    def _run_probe(self, c: Candidate, env: Environment) -> ProbeOutcome:
        probe_env = {**env.run_env(), "BISECTOR_PACKAGE": c.package, "BISECTOR_CANDIDATE": c.ref}
        with self.gpus.slot() as gpu:  # one probe per GPU; environments build without holding one
            if gpu is not None:
                probe_env["CUDA_VISIBLE_DEVICES"] = gpu
            outcome = run_probe(self.probe, env.python, probe_env)
        _check_shutdown()
        return outcome

    def prefetch(self, candidates: list[Candidate]) -> None:
        """Build the environments of candidates that may be probed next, in the background."""
        prefetch = getattr(self.envs, "prefetch", None)
        if prefetch and candidates:
            prefetch(self.spec, [self.target(c) for c in candidates])
