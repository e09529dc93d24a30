"""Cells in worker processes forked after the ML stack is imported (CPU meter), as many at once as
this machine's memory holds, and a worker's death said for what it was.

Each worker is a ``fork()`` of the probe once torch, accelerate and transformers are imported and
before any tensor op ran, so it starts with the same state a sequential run has at that point and
pays no import of its own. Workers take cells round-robin in plan order and measure them exactly as
the sequential loop does (``run_cell``: fresh model, loop, meter and environment per cell); each
record goes to its own file the moment it is measured, so the result is the same byte for byte
whatever the number of workers, and a worker that dies loses only the cell it was measuring: another
worker takes the rest of its share. The probe itself never measures, so a kill never takes it down.
(CUDA cells run in the probe's own process, or one interpreter each with ``--isolate``: a fork cannot
use a CUDA driver its parent started.)

How a worker died is said. SIGKILL is what the kernel's OOM killer sends: a worker killed by it is
``killed: out of host memory`` (an out-of-memory cell), with the cgroup's ``oom_kill`` count as the
evidence where it can be read (when that count did not move, the kill was someone else's, and said
so). A cell killed while other workers ran beside it is measured once more alone, after them.

How many at once (:func:`plan_workers`): ``--workers``, else ``$BISECTOR_CPUS`` (the cores the
orchestrator gives this probe), never more than the cells, and never more than fit in the memory
available: the largest cell's estimate times the workers must not exceed it, else fewer workers run
and the result's ``workers`` says why.
"""
from __future__ import annotations

import json
import os
import select
import signal
import tempfile

from _meters.cgroup import oom_kills

CPUS_ENV = "BISECTOR_CPUS"
POLL_S = 0.05
GIB = 1 << 30


def worker_count(requested: int, n_cells: int) -> int:
    """Workers wanted: ``requested`` (0 = $BISECTOR_CPUS, default 1), never more than the cells."""
    if requested <= 0:
        try:
            requested = int(os.environ.get(CPUS_ENV, "1"))
        except ValueError:
            requested = 1
    return max(1, min(requested, n_cells))


def fit_in_memory(wanted: int, cell_bytes, available):
    """(workers, why fewer or None): at most ``wanted``, and ``cell_bytes`` x workers <= ``available``
    (unknown sizes leave ``wanted`` as it is; one worker always runs, the probe refused before)."""
    fit = max(1, int(available // cell_bytes)) if cell_bytes and available else wanted
    if fit >= wanted:
        return wanted, None
    return fit, (f"{wanted} workers asked, {fit} run: a cell needs about {cell_bytes / GIB:.1f} GiB and "
                 f"{available / GIB:.1f} GiB of memory is available")


def plan_workers(requested: int, n_cells: int, cell_bytes, available) -> dict:
    """The worker decision as the result records it: asked, used, the estimate and why fewer."""
    wanted = worker_count(requested, n_cells)
    used, why = fit_in_memory(wanted, cell_bytes, available)
    plan = {"asked": wanted, "used": used, "cell_estimate_bytes": cell_bytes, "available_bytes": available}
    if why:
        plan["fewer"] = why
    return plan


def death(status: int, kills_before, kills_after) -> tuple[str, bool]:
    """(what ended a worker that left its cell unmeasured, whether it ran out of host memory)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:
            return f"worker crashed: killed by signal {sig} ({signal.Signals(sig).name})", False
        if kills_before is not None and kills_after is not None:
            if kills_after > kills_before:
                return (f"killed: out of host memory (the kernel's OOM killer; its count in this cgroup went "
                        f"{kills_before} -> {kills_after})"), True
            return ("worker killed by SIGKILL, not by the OOM killer (the cgroup's OOM kill count stayed at "
                    f"{kills_after})"), False
        return "killed: out of host memory (SIGKILL, as the kernel's OOM killer sends it)", True
    return f"worker process exited {os.WEXITSTATUS(status)} without a result", False


def _child(run_cell, spec, share, cells, tmp, notify) -> None:
    """In the worker: measure ``share`` (plan indices), one record file each; never returns."""
    code = 0
    try:
        for i in share:
            record = run_cell(spec, cells[i])
            path = os.path.join(tmp, f"cell{i}.json")
            with open(path + ".part", "w") as fh:
                json.dump(record, fh)
            os.replace(path + ".part", path)
            os.write(notify, f"{i}\n".encode())
    except BaseException:  # noqa: BLE001 - the parent reports the cell this worker left unmeasured
        code = 1
    finally:
        os._exit(code)


class _Workers:
    """Forks workers, collects their records as they come, and answers for the ones that die."""

    def __init__(self, run_cell, spec, cells, tmp, on_done):
        self.run_cell, self.spec, self.cells, self.tmp, self.on_done = run_cell, spec, cells, tmp, on_done
        self.records: dict[int, dict] = {}
        self.running: dict[int, list[int]] = {}   # pid -> its share (plan indices), measured ones dropped
        self.again: list[int] = []                # cells killed beside other workers: measured alone
        self.kills = oom_kills()
        self._read, self._write = os.pipe()

    def spawn(self, share: list[int]) -> None:
        pid = os.fork()
        if pid == 0:
            os.close(self._read)
            _child(self.run_cell, self.spec, share, self.cells, self.tmp, self._write)
        self.running[pid] = list(share)

    def _collect(self, i: int) -> None:
        with open(os.path.join(self.tmp, f"cell{i}.json")) as fh:
            self.records[i] = json.load(fh)
        for share in self.running.values():
            if i in share:
                share.remove(i)
        if self.on_done:
            self.on_done(self.records[i])

    def _drain(self, timeout: float) -> None:
        ready, _, _ = select.select([self._read], [], [], timeout)
        if ready:
            for line in os.read(self._read, 65536).decode().split():
                self._collect(int(line))

    def wait_all(self) -> None:
        """Until every worker ended; a dead worker's rest goes to a new one."""
        while self.running:
            self._drain(POLL_S)
            for pid in list(self.running):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    self._drain(0)  # what it wrote before it ended
                    self._ended(pid, status)

    def _ended(self, pid: int, status: int) -> None:
        left = self.running.pop(pid)
        if not left:
            return
        cell, rest = left[0], left[1:]
        kills = oom_kills()
        why, out_of_memory = death(status, self.kills, kills)
        self.kills = kills
        if out_of_memory and self.running and cell not in self.again:
            self.again.append(cell)  # it may fit alone
        else:
            self.records[cell] = {**self.cells[cell], "error": why}
            if self.on_done:
                self.on_done(self.records[cell])
        if rest:
            self.spawn(rest)

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)


def run_cells(run_cell, spec, cells, workers, on_done=None) -> list:
    """Records of ``cells`` (plan order): in forked workers on the CPU; on CUDA in this process
    (``torch.cuda.is_available()`` may have started the driver here, and a fork cannot use it)."""
    if spec["device"] == "cpu" and hasattr(os, "fork"):
        return run_parallel(run_cell, spec, cells, workers, on_done)
    records = []
    for cell in cells:
        records.append(run_cell(spec, cell))
        if on_done:
            on_done(records[-1])
    return records


def run_parallel(run_cell, spec, cells, workers, on_done=None) -> list:
    """Records of ``cells`` (plan order) measured by ``workers`` forked processes at once."""
    with tempfile.TemporaryDirectory(prefix="ga_memory_workers_") as tmp:
        pool = _Workers(run_cell, spec, cells, tmp, on_done)
        try:
            for w in range(workers):
                if cells[w::workers]:
                    pool.spawn(list(range(len(cells)))[w::workers])
            pool.wait_all()
            while pool.again:
                pool.spawn([pool.again[0]])
                pool.wait_all()
                pool.again = [i for i in pool.again if i not in pool.records]
        finally:
            pool.close()
    return [pool.records[i] for i in range(len(cells))]
