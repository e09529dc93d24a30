"""One stored run of any kind (bisect, diff, matrix, probe): the one writer of the runs table and the
runs' step logs, the one place a run id is minted, and which earlier run of the same job the same
command continues.

A run's row names its owner (host, pid and the process's start time): a run left ``running`` by a
process that is gone (``kill -9``, a power cut) is as stopped as an ``interrupted`` one, and the same
command run again continues it under its own id, as the interrupt message says.
"""
from __future__ import annotations

import hashlib
import os
import socket
import uuid
from typing import Any, Optional

from pydantic import BaseModel

from bisector.store.storage import RunKind, RunRow, RunState, StepRow, Store, now


def new_run_id() -> str:
    """A fresh run id: every run is its own (two identical runs started at once are two runs)."""
    return uuid.uuid4().hex[:12]


def config_hash(config: BaseModel) -> str:
    """Identical jobs share a config hash (how to run them, ``[run]``, aside): the same command again
    finds its stopped run by it, ``--resume`` a job's runs. Each run has its own id; measurements are
    reused by their own keys."""
    return hashlib.sha256(config.model_dump_json(exclude={"run"}).encode()).hexdigest()[:12]


def _start_ticks(pid: int) -> Optional[str]:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat field 22); None when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def this_owner() -> str:
    """This process as a run's owner: ``host:pid:start``."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_ticks(os.getpid()) or '?'}"


def owner_alive(owner: Optional[str]) -> bool:
    """Whether the process a run's row names is still running. A row without an owner, or one owned on
    another host, cannot be checked here: it counts as alive (never taken over)."""
    if not owner:
        return True
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    pid = int(pid_text)
    now_start = _start_ticks(pid)
    if now_start is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return start == "?"
    return start in ("?", now_start)


def stopped(run: RunRow) -> bool:
    """The run ended before its answer: interrupted, or ``running`` with its process gone."""
    return run.status == RunState.INTERRUPTED or (run.status == RunState.RUNNING and not owner_alive(run.owner))


def shown_status(run: RunRow) -> str:
    """A run's status as ``bisector runs`` shows it (a dead ``running`` run is ``stopped``)."""
    return "stopped" if run.status == RunState.RUNNING and stopped(run) else run.status


def stopped_run(store: Optional[Store], kind: RunKind, config_hash: Optional[str]) -> Optional[RunRow]:
    """The run that the same command, run again, continues: the latest run of this job (its kind and
    config hash) when it stopped before its end."""
    if store is None or not config_hash:
        return None
    runs = store.runs_with_hash(config_hash, kind)
    return runs[0] if runs and stopped(runs[0]) else None


def claimed(store: Store, run_id: Optional[str]) -> Optional[str]:
    """``run_id`` once this process holds it (its row running, owned by this process, its step log cleared);
    None when another live process runs it now (the same command started twice at once: the second is a run
    of its own, never a second writer of one log), or none was named."""
    if run_id is None:
        return None
    me = this_owner()

    def free(status: str, owner: Optional[str], updated: str) -> bool:
        return status != RunState.RUNNING or owner == me or not owner_alive(owner)

    return run_id if store.claim_run(run_id, me, free) else None


class RunRecord:
    """Records one run of ``kind`` in ``store``: its row (``begin``, ``save``, ``forget``) and its
    step log (``step``). ``run_id``: a stopped run continued under its own id (else a new one)."""

    def __init__(self, store: Store, kind: RunKind, command: list[str], config: dict[str, Any],
                 config_hash: Optional[str] = None, run_id: Optional[str] = None, created: Optional[str] = None):
        self.store, self.kind, self.command, self.config, self.config_hash = store, kind, command, config, config_hash
        self.run_id = run_id or new_run_id()
        self.created = created or now()

    def begin(self) -> None:
        """A new attempt of the run: its earlier step log goes (the measurements stay stored). A stopped run
        that another live process has just taken up (the same command started twice at once) is left to it:
        this attempt becomes a run of its own (a new ``run_id``), so no two processes write one log."""
        self.run_id = claimed(self.store, self.run_id) or new_run_id()
        self.save(RunState.RUNNING)

    def save(self, status: str, result: Optional[dict[str, Any]] = None, updated: Optional[str] = None) -> None:
        """The run's row as it stands: ``status`` and, when finished, its ``result``."""
        _put(self.store, RunRow(id=self.run_id, created=self.created, updated=updated or now(), kind=self.kind,
                                command=self.command, config=self.config, status=status, result=result,
                                config_hash=self.config_hash, owner=this_owner() if status == RunState.RUNNING else None))

    def step(self, step: StepRow) -> None:
        """The next line of the run's log."""
        self.store.add_step(step.model_copy(update={"run_id": self.run_id}))

    def forget(self) -> None:
        """A run rejected before its first step leaves no run to list or resume."""
        self.store.delete_run(self.run_id)


def amend_result(store: Store, run: RunRow, result: dict[str, Any]) -> None:
    """A finished run's stored result, amended (``report --repro`` adds what the repro script gave)."""
    _put(store, run.model_copy(update={"result": result, "updated": now()}))


def _put(store: Store, run: RunRow) -> None:
    """The one write of a run's row (the store's own ``put_run`` is called nowhere else)."""
    store.put_run(run)
