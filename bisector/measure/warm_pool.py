"""Warm workers in use: one fork server (bisector.measure.warm_server) per candidate environment and
built-in probe, started on the first run that needs it and shared by every later run there (the job's
probe and its contrast, each repeat and stats-mode sample).

A worker serves the runs whose environment matches the one it was started with, except for the
variables that belong to one run (``PER_RUN``: the result and proof files, the GPU, the cores), which
each child gets from its own request; CUDA_VISIBLE_DEVICES is never given to the worker, which must
not touch CUDA. A worker that refuses (the probe does not opt in, or its imports left the process
unlike a fresh one: see bisector/measure/warm_worker.py) is remembered and that probe runs in plain processes
there, as do custom probes and ``--probe-cmd``. At most ``capacity`` workers stay alive (the least
recently used idle one ends first), and one idle for ``idle_s`` ends by itself.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from bisector.envs import HOOK_NAME, MODULES_ENV, PROOF_ENV
from bisector.job.probe_code import builtin_files
from bisector.job.probe import Probe
from bisector.core.facts import RESULT_ENV
from bisector.measure.warm_server import WarmLost, WarmServer
from bisector.process.procs import Completed

WORKER = Path(__file__).with_name("warm_worker.py")   # run by path with the environment's interpreter
PER_RUN = (RESULT_ENV, PROOF_ENV, MODULES_ENV, "CUDA_VISIBLE_DEVICES", "BISECTOR_CPUS")
MAX_LOSSES = 2          # a worker that ended under its runs this often: the probe runs cold there
IDLE_CHECK_S = 5.0


@dataclass
class Launch:
    """How a probe run was launched: ``done`` when a warm worker ran it (None: run it as a plain
    process), and what is stored next to it (``details``)."""

    done: Optional[Completed]
    details: dict = field(default_factory=dict)


class WarmPool:
    """The warm workers of one run (one executor): at most ``capacity`` alive, each ending after
    ``idle_s`` unused; ``enabled`` False runs every probe as a plain process."""

    def __init__(self, capacity: int = 2, idle_s: float = 120.0, enabled: bool = True):
        self.capacity, self.idle_s, self.enabled = max(1, capacity), idle_s, enabled
        self._servers: dict[tuple, WarmServer] = {}
        self._refused: dict[tuple, str] = {}
        self._losses: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._reaper: Optional[threading.Thread] = None
        atexit.register(self.close)

    def serves(self, spec: Probe) -> bool:
        """Whether runs of ``spec`` may fork from a warm worker (built-in probes, with warm workers on)."""
        return self.enabled and spec.warm_capable

    def run(self, spec: Probe, python: Path, env: dict[str, str], cwd: Path, identity: str,
            on_line: Optional[Callable[[str], None]] = None) -> Launch:
        """Run the probe in a child of the warm worker of this environment (``identity``: the
        environment's path and build), starting the worker if needed; ``Launch.done`` is None when
        the probe is to run cold (the reason is in ``details``)."""
        if not self.enabled:
            return Launch(None, {"mode": "cold", "why": "warm workers are off"})
        if not spec.warm_capable:
            return Launch(None, {"mode": "cold", "why": f"a {spec.kind_label} probe runs as its own process"})
        script = spec.script()
        key = _key(python, script, identity, env)
        start = time.monotonic()
        server, why = self._server(key, python, script, env, spec.timeout)
        if server is None:
            return Launch(None, {"mode": "cold", "why": why})
        waited = time.monotonic() - start
        drop = [] if PROOF_ENV in env else [f"{HOOK_NAME}:{HOOK_NAME}"]
        try:  # its seconds include the wait for the worker: what the run cost
            done = server.run(list(spec.args), env, cwd, spec.timeout, on_line, drop, start=start)
        except WarmLost as exc:
            self._lost(key, server)
            return Launch(None, {"mode": "cold", "why": f"{exc}; run again in a plain process"})
        details = {"mode": "warm", "worker_pid": server.pid, "runs_served": server.served}
        if server.served == 1 or waited > 0.05:
            details.update(worker_wait_s=round(waited, 3), worker_started_at=round(server.started_at, 3),
                           worker_start_s=round(server.start_seconds or 0.0, 3), worker_imports_s=server.import_seconds)
        return Launch(done, details)

    def start(self, spec: Probe, python: Path, env: dict[str, str], identity: str) -> None:
        """Have the worker a run with these would use ready (started now if needed), without a run."""
        if self.serves(spec):
            script = spec.script()
            self._server(_key(python, script, identity, env), python, script, env, spec.timeout)

    def bound(self, identity: str) -> Callable[..., Launch]:
        """:meth:`run` for the environment ``identity`` (what bisector.measure.probe_process.run_probe takes)."""
        return lambda spec, python, env, cwd, on_line=None: self.run(spec, python, env, cwd, identity, on_line)

    def _server(self, key: tuple, python: Path, script: Path, env: dict[str, str],
                timeout: float) -> tuple[Optional[WarmServer], str]:
        """The ready worker of ``key`` (started now if needed), or None and why it cannot serve."""
        evicted: list[WarmServer] = []
        with self._lock:
            if self._closed:
                return None, "the run is ending"
            if key in self._refused:
                return None, self._refused[key]
            server = self._servers.get(key)
            if server is not None and not server.alive and server.ready.is_set():
                del self._servers[key]
                server = None
            if server is None:
                worker_env = {k: v for k, v in env.items() if k not in PER_RUN}
                worker_env[PROOF_ENV] = "/dev/null"  # the proof hook registers; each run names its own file
                try:
                    server = WarmServer(python, WORKER, script, worker_env)
                except OSError as exc:  # the plain run will say what is wrong with this interpreter
                    return None, f"the warm worker could not start: {exc}"
                evicted = self._make_room()
                self._servers[key] = server
                self._start_reaper()
            server.waiting += 1
        for old in evicted:
            old.close()
        try:
            why = server.wait_ready(timeout)
        finally:
            with self._lock:
                server.waiting -= 1
        if why is None:
            return server, ""
        with self._lock:
            self._refused[key] = why
            if self._servers.get(key) is server:
                del self._servers[key]
        server.close()
        return None, why

    def _make_room(self) -> list[WarmServer]:
        """Take out the least recently used idle workers until one more fits (called holding the lock);
        the caller ends them."""
        idle = sorted((s.last_used, k) for k, s in self._servers.items() if _idle(s))
        out = []
        while len(self._servers) >= self.capacity and idle:
            _, key = idle.pop(0)
            out.append(self._servers.pop(key))
        return out

    def _lost(self, key: tuple, server: WarmServer) -> None:
        with self._lock:
            self._losses[key] = self._losses.get(key, 0) + 1
            if self._losses[key] >= MAX_LOSSES:
                self._refused[key] = f"the warm worker ended under {MAX_LOSSES} runs"
            if self._servers.get(key) is server:
                del self._servers[key]
        server.close()

    def _start_reaper(self) -> None:
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(target=self._reap_idle, name="bisector-warm-idle", daemon=True)
            self._reaper.start()

    def _reap_idle(self) -> None:
        while True:
            time.sleep(IDLE_CHECK_S)
            with self._lock:
                if self._closed or not self._servers:
                    return
                now = time.monotonic()
                stale = [k for k, s in self._servers.items() if _idle(s) and now - s.last_used > self.idle_s]
                servers = [self._servers.pop(k) for k in stale]
            for server in servers:
                server.close()

    def alive(self) -> list[WarmServer]:
        """The workers alive now."""
        with self._lock:
            return [s for s in self._servers.values() if s.alive]

    def close(self) -> None:
        """End every worker (at the end of the run, and at exit)."""
        with self._lock:
            self._closed = True
            servers = list(self._servers.values())
            self._servers.clear()
        for server in servers:
            server.close()


def _idle(server: WarmServer) -> bool:
    return server.busy == 0 and server.waiting == 0 and server.ready.is_set()


def _key(python: Path, script: Path, identity: str, env: dict[str, str]) -> tuple:
    """Which worker serves a run: the interpreter, the probe's code, the environment's build and the
    variables every run there shares."""
    return str(python), str(script), _code_hash(script), identity, _shared_hash(env)


def _shared_hash(env: dict[str, str]) -> str:
    """What a worker's runs must share: every variable but the per-run ones."""
    shared = sorted((k, v) for k, v in env.items() if k not in PER_RUN)
    return hashlib.sha256(json.dumps(shared).encode()).hexdigest()[:16]


def _code_hash(script: Path) -> str:
    """The probe's code as the worker imported it (its files and the shared contract)."""
    h = hashlib.sha256()
    for f in builtin_files(script):
        h.update(str(f).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]
