"""The launcher a probe runs under: it dies with bisector and takes every process the probe started with it.

Run as ``python -I -S launcher.py PARENT_PID -- ARGV...`` (standard library only: it is run by
path, also by interpreters without bisector installed). bisector starts it in a session of its own;
it forks ARGV in that session and waits for it. On Linux it is

* a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): a daemon that double-forks and calls
  ``setsid()`` to leave the session is reparented to the launcher, not to init, so it is still found;
* bound to its parent by a parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGHUP)``): when bisector
  dies, even by ``kill -9``, the launcher kills everything below it and exits; ARGV in turn is bound
  to the launcher (``SIGKILL``), so a launcher killed outright takes ARGV with it (not ARGV's own
  children: nothing is left to find them).

When ARGV exits (or is stopped: SIGINT and SIGTERM reach the whole session from bisector) the launcher
kills what is left, every process of its session and every descendant, reaps them, and exits as ARGV
did (the same code, or the same signal). It is Linux's (``/proc``, ``prctl``): elsewhere bisector runs
children without it, in a process group of their own that a stop signals as a whole.

:func:`leftovers` and :func:`kill_leftovers` are importable for other supervisors (a fork server
reaping its children's subtrees).
"""
from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import time

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
TERM_GRACE_S = 1.0   # after SIGTERM, what is still running is killed (bisector's SIGKILL follows at 1.5 s)
KILL_ROUNDS = 200    # kill, reap, look again: a process forking as it dies is caught within these rounds


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)``; False where it is not available."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (AttributeError, OSError):
        return False


def _stat(pid: str):
    """(ppid, session, state) of a process from /proc, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[3]), fields[0].decode()


def leftovers(root: int | None = None, session: bool = True) -> list[int]:
    """Every live process below ``root`` (default: this process) and, with ``session``, in its session,
    ``root`` excluded (a supervisor of several children passes ``session=False`` and a child's pid).

    Zombies are left out (they are dead; reaping removes them)."""
    root = os.getpid() if root is None else root
    sid = os.getsid(root) if session else None
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (facts := _stat(name)) is not None:
            table[int(name)] = facts
    below, frontier = set(), [root]
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in below:
                below.add(child)
                frontier.append(child)
    found = below | {pid for pid, (_, s, _) in table.items() if sid is not None and s == sid}
    return sorted(pid for pid in found if pid != root and table[pid][2] != "Z")


REAPED: dict[int, int] = {}   # pid -> wait status of every child collected by _reap


def _reap() -> None:
    """Collect every child that has exited (the launcher's own, and orphans reparented to it)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = status


def kill_leftovers(root: int | None = None, sig: int = signal.SIGKILL, session: bool = True) -> int:
    """Send ``sig`` to every process :func:`leftovers` finds until none is left; how many were found."""
    seen: set[int] = set()
    for _ in range(KILL_ROUNDS):
        pids = leftovers(root, session)
        if not pids:
            break
        seen.update(pids)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        if sig != signal.SIGKILL:
            return len(seen)
        time.sleep(0.005)
        _reap()
    _reap()
    return len(seen)


def _exit_like(status: int) -> None:
    """Exit as the child did: its exit code, or death by its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _spawn(argv: list[str]) -> int:
    """Fork and exec ``argv``; it is bound to the launcher by a parent-death signal of its own, for when the
    launcher itself is killed outright (Ray's raylet SIGKILLs a dead worker's children)."""
    launcher = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != launcher:
                os._exit(137)
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(2, f"bisector launcher: cannot run {argv[0]}: {exc.strerror}\n".encode())
        os._exit(127)
    return pid


def main(args: list[str]) -> None:
    parent, argv = int(args[0]), args[2:]
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, lambda *_: None)   # handled below, after the wake-up byte
    prctl(PR_SET_PDEATHSIG, signal.SIGHUP)
    if os.getppid() != parent:   # bisector died before the parent-death signal was set
        os._exit(129)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    child = _spawn(argv)
    deadline = None
    while True:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([wake_r], [], [], 1.0 if timeout is None else min(timeout, 1.0))
        got = os.read(wake_r, 512) if ready else b""
        if signal.SIGHUP in got:           # bisector is gone: nobody waits for a graceful end
            kill_leftovers()
            os._exit(129)
        if signal.SIGTERM in got and deadline is None:
            deadline = time.monotonic() + TERM_GRACE_S
            kill_leftovers(sig=signal.SIGTERM)   # the daemons that left the session get it too
        _reap()
        if child in REAPED:
            kill_leftovers()
            _exit_like(REAPED[child])
        if deadline is not None and time.monotonic() >= deadline:
            kill_leftovers()


if __name__ == "__main__":
    main(sys.argv[1:])
