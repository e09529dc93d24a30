"""Run a child process in its own session with bounded output capture and escalating shutdown.

Shutdown escalates SIGINT -> SIGTERM -> SIGKILL to the whole group (nox-style), so a probe's own
children (dataloader workers, compilers) never outlive it. A *supervised* child (``supervise=True``,
what probes use) runs under :mod:`bisector.process.launcher`: a subreaper bound
to this process by a parent-death signal, which kills everything the child left behind (children,
grandchildren, daemons that left the session) when the child ends, and everything at once when
bisector dies, even by ``kill -9``. :func:`supervised` and :func:`spawn` are the reusable API for
other long-lived children (a worker per environment).
"""
from __future__ import annotations

import collections
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from bisector.process import launcher

TAIL_BYTES = 64 * 1024
GRACE = (("SIGINT", 2.0), ("SIGTERM", 1.5), ("SIGKILL", 1.0))

_active: set[subprocess.Popen] = set()
_active_lock = threading.Lock()
SHUTDOWN = threading.Event()
POLL = 0.1


class Interrupted(BaseException):
    """The run is shutting down (Ctrl-C or SIGTERM): nothing half-done may be recorded."""


def request_shutdown() -> None:
    """Ask every running child to stop; workers then raise :class:`Interrupted`."""
    SHUTDOWN.set()


def _pidfd(proc: subprocess.Popen) -> Optional[int]:
    """A descriptor that becomes readable when ``proc`` exits (Linux >= 5.3), or None (also for a child
    of another process, whose exit code comes from its parent: its handle's ``wait`` is waited on)."""
    if not isinstance(proc, subprocess.Popen):
        return None
    try:
        return os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return None


def _wait(proc: subprocess.Popen, timeout: Optional[float]) -> bool:
    """Wait for ``proc``; True if it timed out. Raises Interrupted (after stopping it) on shutdown.

    With a pidfd the wait wakes the moment the child exits (``Popen.wait(timeout)`` polls with sleeps
    of up to 50 ms, which is a third of a short probe's time)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pidfd = _pidfd(proc)
    try:
        while True:
            if SHUTDOWN.is_set():
                stop_group(proc)
                raise Interrupted()
            step = POLL if deadline is None else min(POLL, deadline - time.monotonic())
            if step <= 0:
                return True
            if pidfd is not None:
                select.select([pidfd], [], [], step)
                if proc.poll() is not None:
                    return False
                continue
            try:
                proc.wait(timeout=step)
                return False
            except subprocess.TimeoutExpired:
                continue
    finally:
        if pidfd is not None:
            os.close(pidfd)


@dataclass
class Completed:
    """How a child ended: exit code (negative = killed by that signal), output tails, timing."""

    returncode: int
    stdout_tail: str
    stderr_tail: str
    seconds: float
    timed_out: bool
    interrupted: bool = False


class _Tail(threading.Thread):
    """Drain a pipe, keeping only its last ``limit`` bytes (a flooding child cannot fill memory or disk);
    ``limit`` None keeps everything (for trusted tools whose whole output is the answer, like git)."""

    def __init__(self, pipe, limit: Optional[int] = TAIL_BYTES, on_line: Optional[Callable[[str], None]] = None,
                 on_output: Optional[Callable[[str], None]] = None):
        super().__init__(daemon=True)
        self.pipe, self.limit, self.on_line, self.on_output = pipe, limit, on_line, on_output
        self.chunks: collections.deque[bytes] = collections.deque()
        self.size = 0
        self.total = 0
        self._partial = b""

    def run(self) -> None:
        for chunk in iter(lambda: self.pipe.read1(65536), b""):
            self.chunks.append(chunk)
            self.size += len(chunk)
            self.total += len(chunk)
            while self.limit is not None and self.size - len(self.chunks[0]) >= self.limit:
                self.size -= len(self.chunks.popleft())
            if self.on_line is not None or self.on_output is not None:
                self._lines(chunk)
        if self._partial and self.on_output is not None:
            self._hand(self.on_output, [self._partial])
        self.pipe.close()

    def _lines(self, chunk: bytes) -> None:
        """Hand each complete line (ended by a newline or a carriage return, as progress bars do)
        to ``on_line`` (the last few: live progress) and every one to ``on_output`` (the output shown as it
        comes); a failing callback never disturbs the draining."""
        *done, self._partial = re.split(rb"[\r\n]", self._partial + chunk)
        self._partial = self._partial[-4096:]
        if self.on_line is not None:
            self._hand(self.on_line, done[-3:])
        if self.on_output is not None:
            self._hand(self.on_output, [line for line in done if line])

    @staticmethod
    def _hand(callback: Callable[[str], None], lines: list[bytes]) -> None:
        for line in lines:
            try:
                callback(line.decode("utf-8", "replace"))
            except Exception:  # noqa: BLE001 - what is shown as it comes is cosmetic; the tail is kept anyway
                pass

    def text(self) -> str:
        data = b"".join(self.chunks)
        data = data if self.limit is None else data[-self.limit:]
        prefix = f"[... {self.total - len(data)} bytes cut ...]\n" if self.total > len(data) else ""
        return prefix + data.decode("utf-8", "replace")


def stop_group(proc: subprocess.Popen) -> None:
    """Interrupt, then terminate, then kill the child's process group, waiting between steps."""
    for name, grace in GRACE:
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, getattr(signal, name))
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue


def stop_all() -> None:
    """Stop every child started through :func:`run_bounded` (used on Ctrl-C / SIGTERM)."""
    with _active_lock:
        procs = list(_active)
    for proc in procs:
        stop_group(proc)


def supervised(argv: list[str]) -> list[str]:
    """``argv`` run under the launcher (see the module): it dies with this process and leaves nothing behind
    (on Linux; elsewhere ``argv`` as it is, in a process group of its own)."""
    if not sys.platform.startswith("linux"):
        return argv
    return [sys.executable, "-I", "-S", launcher.__file__, str(os.getpid()), "--", *argv]


def spawn(argv: list[str], env: Optional[dict[str, str]], cwd: Optional[Path] = None, supervise: bool = True,
          **popen) -> subprocess.Popen:
    """Start ``argv`` (never through a shell) in a session of its own, supervised unless told otherwise,
    and registered with :func:`stop_all`; ``popen``: the standard streams (stdin defaults to /dev/null).
    The caller waits for it (``stop_group`` on shutdown) and calls :func:`forget` once it has ended."""
    popen.setdefault("stdin", subprocess.DEVNULL)
    if supervise and shutil.which(argv[0], path=(os.environ if env is None else env).get("PATH")) is None:
        raise FileNotFoundError(2, "No such file or directory", argv[0])   # as Popen says it unsupervised
    proc = subprocess.Popen(supervised(argv) if supervise else argv, env=env, cwd=cwd, start_new_session=True,
                            **popen)
    with _active_lock:
        _active.add(proc)
    return proc


def forget(proc: subprocess.Popen) -> None:
    """``proc`` has ended: :func:`stop_all` no longer needs to stop it."""
    with _active_lock:
        _active.discard(proc)


def run_bounded(argv: list[str], env: Optional[dict[str, str]], cwd: Optional[Path] = None,
                timeout: Optional[float] = None, limit: Optional[int] = TAIL_BYTES,
                on_line: Optional[Callable[[str], None]] = None, supervise: bool = False,
                on_output: Optional[Callable[[str, str], None]] = None) -> Completed:
    """Run ``argv`` (never through a shell) in a new session; stop its group on timeout or shutdown.

    Each of stdout and stderr keeps its last ``limit`` bytes (None: all of it); ``on_line`` is
    handed each line of stderr as it comes (live progress), ``on_output`` every line of both, with its
    stream's name (``stdout``, ``stderr``); ``supervise``: under the launcher."""
    if SHUTDOWN.is_set():
        raise Interrupted()
    start = time.monotonic()
    proc = spawn(argv, env, cwd, supervise=supervise, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return watch(proc, proc.stdout, proc.stderr, start, timeout, limit, on_line, on_output)


def watch(proc, stdout, stderr, start: float, timeout: Optional[float] = None, limit: Optional[int] = TAIL_BYTES,
          on_line: Optional[Callable[[str], None]] = None,
          on_output: Optional[Callable[[str, str], None]] = None) -> Completed:
    """Watch a started child to its end as :func:`run_bounded` does: its output drained from the pipes
    ``stdout`` and ``stderr`` (binary files), its group stopped on timeout or shutdown. ``proc`` is a
    ``Popen`` or an object like one (``pid``, ``poll()``, ``wait(timeout)``: a warm worker's child)
    whose pid leads its own process group; ``start`` is when it was asked for (``time.monotonic``)."""
    with _active_lock:
        _active.add(proc)
    shown = {name: (lambda line, name=name: on_output(name, line)) if on_output else None
             for name in ("stdout", "stderr")}
    tails = [_Tail(stdout, limit, on_output=shown["stdout"]), _Tail(stderr, limit, on_line, shown["stderr"])]
    for t in tails:
        t.start()
    try:
        timed_out = _wait(proc, timeout)
        if timed_out:
            stop_group(proc)
    except BaseException:
        stop_group(proc)
        raise
    finally:
        forget(proc)
    for t in tails:
        t.join(timeout=5)
    if SHUTDOWN.is_set():
        raise Interrupted()
    return Completed(proc.wait(), tails[0].text(), tails[1].text(), time.monotonic() - start, timed_out)
