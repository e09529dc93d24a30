"""One warm worker (bisector/measure/warm_worker.py, run by path): a fork server for one probe in one
candidate environment, seen from the orchestrator.

The worker is started with the environment's interpreter under the launcher (bisector.process.launcher:
it dies with bisector, even by ``kill -9``, and takes everything below the worker with it), a
SOCK_SEQPACKET control socket its only link (when this process ends, the socket closes and the worker
ends, killing its children). ``run`` asks it for one probe run: the write ends of two fresh pipes travel with the
request and become the child's stdout and stderr, and the child is then watched exactly like a plain
probe process (:func:`bisector.process.procs.watch`: bounded output, timeout, shutdown of its process
group), its exit code coming from the worker, which is its parent.
"""
from __future__ import annotations

import array
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from bisector.process.procs import SHUTDOWN, Completed, Interrupted, forget, spawn, stop_group, watch

FD_ENV = "BISECTOR_WARM_FD"
MAX_MESSAGE = 1 << 20
POLL_S = 0.1


class WarmLost(Exception):
    """The worker ended (or never answered) before a run's end was known: take it again in a plain process."""


class _Child:
    """A run forked by the worker, shaped like a ``Popen`` for :func:`bisector.process.procs.watch` (its pid
    leads its own process group; its exit code arrives from the worker)."""

    def __init__(self, server: "WarmServer"):
        self.server = server
        self.pid = 0
        self.returncode: Optional[int] = None
        self.lost = False
        self.started = threading.Event()
        self.ended = threading.Event()
        self.why: Optional[str] = None

    def _end(self, code: int, lost: bool = False) -> None:
        if not self.ended.is_set():
            self.returncode, self.lost = code, lost
            self.started.set()
            self.ended.set()

    def poll(self) -> Optional[int]:
        return self.returncode if self.ended.is_set() else None

    def wait(self, timeout: Optional[float] = None) -> int:
        if not self.ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"warm run {self.pid}", timeout)
        return self.returncode  # type: ignore[return-value]


class WarmServer:
    """The worker for ``script`` under ``python`` with the environment ``env`` (what every run shares)."""

    def __init__(self, python: Path, worker: Path, script: Path, env: dict[str, str]):
        here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = here
        self._lock = threading.Lock()
        self._runs: dict[int, _Child] = {}
        self._next_id = 0
        self.ready = threading.Event()
        self.refused: Optional[str] = None
        self.start_seconds: Optional[float] = None   # wall from spawn to ready
        self.import_seconds: Optional[float] = None  # the worker's own count of its warm-up
        self.served = 0
        self.busy = 0      # runs in flight
        self.waiting = 0   # runs waiting for it to be ready (the pool counts them)
        self.last_used = time.monotonic()
        self._started = time.monotonic()
        self.started_at = time.time()
        self.pid = 0   # the worker's own (self.proc is its launcher), once it is ready
        try:
            self.proc = spawn([str(python), str(worker), str(script)], {**env, FD_ENV: str(there.fileno())},
                              script.parent, supervise=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, pass_fds=[there.fileno()])
        finally:
            there.close()
        threading.Thread(target=self._read, name=f"bisector-warm-{self.proc.pid}", daemon=True).start()

    # -- the worker's messages -------------------------------------------------------------------
    def _read(self) -> None:
        try:
            while True:
                data = self._sock.recv(MAX_MESSAGE)
                if not data:
                    break
                self._dispatch(json.loads(data))
        except (OSError, ValueError):
            pass
        self._gone("the warm worker ended")

    def _dispatch(self, message: dict) -> None:
        op = message.get("op")
        if op == "ready":
            self.pid = int(message.get("pid") or 0)
            self.import_seconds = message.get("seconds")
            self.start_seconds = time.monotonic() - self._started
            self.ready.set()
        elif op == "refused":
            self.refused = str(message.get("why") or "refused")
            self.ready.set()
        else:
            with self._lock:
                run = self._runs.get(message.get("id"))
            if run is None:
                return
            if op == "started":
                run.pid = int(message["pid"])
                run.started.set()
            elif op == "failed":
                run.why = message.get("why")
                run._end(-1, lost=True)
            elif op == "exited":
                run._end(int(message["code"]))

    def _gone(self, why: str) -> None:
        if not self.ready.is_set():
            self.refused = f"{why} before it was ready (exit code {self.proc.poll()})"
            self.ready.set()
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:  # each died with the worker; what it started goes with its process group
            if run.pid:
                _kill_group(run.pid)
            run.why = why
            run._end(-9, lost=True)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None and self.refused is None

    # -- use -------------------------------------------------------------------------------------
    def wait_ready(self, timeout: float) -> Optional[str]:
        """Wait until the worker is ready: None, or why it cannot serve (refused, ended, too slow)."""
        deadline = time.monotonic() + timeout
        while not self.ready.wait(POLL_S):
            if SHUTDOWN.is_set():
                self.close()
                raise Interrupted()
            if time.monotonic() > deadline:
                self.close()
                return f"the warm worker was not ready after {timeout:.0f}s"
        return self.refused

    def run(self, args: list[str], env: dict[str, str], cwd: Path, timeout: Optional[float],
            on_line: Optional[Callable[[str], None]], drop_atexit: list[str],
            start: Optional[float] = None) -> Completed:
        """One probe run forked by the worker, watched like a plain one (its seconds counted from ``start``,
        default now); raises WarmLost when the worker ended before the run's end was known."""
        start = time.monotonic() if start is None else start
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        out, err = open(out_r, "rb"), open(err_r, "rb")  # closed by watch's readers at the child's end
        run = _Child(self)
        with self._lock:
            self._next_id += 1
            request_id = self._next_id
            self._runs[request_id] = run
            self.busy += 1
        request = {"op": "run", "id": request_id, "args": list(args), "env": env, "cwd": str(cwd),
                   "drop_atexit": drop_atexit}
        try:
            try:
                self._sock.sendmsg([json.dumps(request).encode()],
                                   [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [out_w, err_w]))])
            except OSError as exc:
                raise WarmLost(f"the warm worker is gone: {exc}") from None
            finally:
                os.close(out_w)
                os.close(err_w)
            while not run.started.wait(POLL_S):
                if SHUTDOWN.is_set():  # the child may be starting: ending the worker ends it
                    self.close()
                    raise Interrupted()
            if run.lost:
                raise WarmLost(run.why or "the warm worker could not start the run")
            pipes, out, err = (out, err), None, None  # watch's readers own them from here
            done = watch(run, *pipes, start, timeout=timeout, on_line=on_line)
            if run.lost:
                raise WarmLost(run.why or "the warm worker ended during the run")
            self.served += 1
            return done
        finally:
            for f in (out, err):
                if f is not None:
                    f.close()
            with self._lock:
                self._runs.pop(request_id, None)
                self.busy -= 1
                self.last_used = time.monotonic()

    def close(self) -> None:
        """End the worker (its running children with it) and wait for it."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            stop_group(self.proc)
        forget(self.proc)
        self._sock.close()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
