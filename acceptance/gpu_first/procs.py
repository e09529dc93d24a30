"""How a acceptance/gpu_first step takes all its processes with it (standard library only, Linux /proc).

:func:`run` starts a command in a process group of its own inside the step's session, its timeout cut
to the step's deadline (``$GF_STEP_DEADLINE``); after the timeout the group and every process below
the command end (SIGTERM, then SIGKILL) and the exit code is ``INNER_TIMEOUT``, or ``NOT_STARTED``
when the deadline left no time to start. :func:`end_all` is how the runner ends a step's session and
whatever came back to it as a child subreaper (:func:`become_subreaper`).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from verdicts import INNER_TIMEOUT, NOT_STARTED

INNER_GRACE_S = 2     # SIGTERM, then this long, then SIGKILL (inside a step: a probe ends on SIGTERM at once)
PR_SET_CHILD_SUBREAPER = 36


def step_left():
    """Seconds left before the step's inner deadline (``$GF_STEP_DEADLINE``), or None outside a runner."""
    deadline = os.environ.get("GF_STEP_DEADLINE")
    return None if not deadline else float(deadline) - time.time()


def _table() -> dict:
    """{pid: (ppid, pgid, sid, state)} of every process (Linux /proc; {} elsewhere)."""
    procs = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return procs
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        procs[int(name)] = (int(fields[1]), int(fields[2]), int(fields[3]), fields[0])
    return procs


def descendants(root: int, procs=None) -> set:
    """Every live process below ``root`` (children, theirs, ...), zombies left out."""
    procs = _table() if procs is None else procs
    below, todo = set(), [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, _, _, state) in procs.items():
            if ppid == parent and pid not in below:
                below.add(pid)
                todo.append(pid)
    return {p for p in below if procs[p][3] != "Z"}


def members(sid=None, pgid=None, root=None) -> set:
    """Live processes of session ``sid`` or group ``pgid``, or below ``root``, never this one."""
    procs = _table()
    found = {pid for pid, (_, g, s, state) in procs.items()
             if state != "Z" and ((sid is not None and s == sid) or (pgid is not None and g == pgid))}
    if root is not None:
        found |= descendants(root, procs)
    found.discard(os.getpid())
    return found


def _signal(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _reap() -> None:
    """Collect our exited children (orphans that came to this subreaper among them)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _alive(pids) -> set:
    procs = _table()
    return {p for p in pids if p in procs and procs[p][3] != "Z"}


def end_all(find, grace: float, reap=_reap) -> int:
    """End every process ``find()`` names: SIGTERM, up to ``grace`` s for them to go, then SIGKILL
    until none is left (``reap`` collects the exited ones that are ours); how many there were."""
    first = find()
    if not first:
        return 0
    _signal(first, signal.SIGTERM)
    until = time.monotonic() + grace
    while time.monotonic() < until:
        reap()
        if not find():
            return len(first)
        time.sleep(0.05)
    for _ in range(200):
        left = find()
        if not left:
            break
        _signal(left, signal.SIGKILL)
        time.sleep(0.05)
        reap()
    return len(first)


def become_subreaper(libc=None):
    """Make this process a child subreaper; None when it is one, else why not (said in check.md as a
    WARN: gVisor or a non-Linux kernel refuse it, and the runner then finds an orphan that left the
    step's session only if it is still below the runner)."""
    try:
        import ctypes

        libc = libc or ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            return f"prctl(PR_SET_CHILD_SUBREAPER) failed: errno {err} ({os.strerror(err) if err else 'unknown'})"
    except Exception as exc:  # noqa: BLE001 - not Linux: the session sweep still runs
        return f"prctl(PR_SET_CHILD_SUBREAPER) unavailable: {type(exc).__name__}: {exc}"
    return None


def run(cmd: list, env: dict, timeout: float) -> tuple:
    """Run ``cmd`` in a process group of its own inside this step's session, its output on ours;
    (exit code, seconds). The timeout is cut to the step's deadline; after it the group and every
    process below ``cmd`` end and the code is ``INNER_TIMEOUT``; ``NOT_STARTED`` when the deadline
    left no time at all."""
    left = step_left()
    if left is not None:
        timeout = min(timeout, left)
    if timeout < 1.0:
        print(f"[run] not started, the step's deadline is {timeout:.1f} s away: {' '.join(cmd)[:200]}", flush=True)
        return NOT_STARTED, 0.0
    start = time.time()
    group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
    proc = subprocess.Popen(cmd, env=env, **group)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        below = descendants(proc.pid) | {proc.pid}   # also those that left its group
        end_all(lambda: members(pgid=proc.pid, root=proc.pid) | _alive(below), INNER_GRACE_S,
                reap=lambda: proc.poll())
        proc.wait()
        code = INNER_TIMEOUT
    return code, time.time() - start
