"""Cells in parallel worker processes forked after the ML stack is imported (CPU meter only).

Each worker is a ``fork()`` of the probe once torch, accelerate and transformers are imported and
before any tensor op ran, so it starts with the same state a sequential run has at that point and
pays no import of its own. Workers take cells round-robin in plan order, measure them exactly as
the sequential loop does (``run_cell``: fresh model, loop, meter and environment per cell) and
hand the records back as JSON through a file; the parent returns them in plan order, so the
result is the same byte for byte whatever the number of workers. A worker that dies leaves its
cells with an ``error``. ``BISECTOR_CPUS`` (set by the orchestrator: the cores this probe may use)
or ``--workers`` says how many; one means the plain sequential loop.
"""
from __future__ import annotations

import json
import os
import tempfile

CPUS_ENV = "BISECTOR_CPUS"


def worker_count(requested: int, n_cells: int) -> int:
    """Workers to use: ``requested`` (0 = $BISECTOR_CPUS, default 1), never more than the cells."""
    if requested <= 0:
        try:
            requested = int(os.environ.get(CPUS_ENV, "1"))
        except ValueError:
            requested = 1
    if not hasattr(os, "fork"):
        return 1
    return max(1, min(requested, n_cells))


def _child(run_cell, spec, cells, out_path) -> None:
    """In the worker: measure ``cells`` and write their records; never returns."""
    code = 0
    try:
        records = [run_cell(spec, cell) for cell in cells]
        with open(out_path, "w") as fh:
            json.dump(records, fh)
    except BaseException:  # noqa: BLE001 - the parent reports a worker that wrote nothing
        code = 1
    finally:
        os._exit(code)


def run_parallel(run_cell, spec, cells, workers, on_done=None) -> list:
    """Records of ``cells`` (plan order) measured by ``workers`` forked processes."""
    shares = [cells[i::workers] for i in range(workers)]
    with tempfile.TemporaryDirectory(prefix="ga_memory_workers_") as tmp:
        children = {}
        for i, share in enumerate(shares):
            out = os.path.join(tmp, f"w{i}.json")
            pid = os.fork()
            if pid == 0:
                _child(run_cell, spec, share, out)
            children[pid] = (i, out)
        records = {}
        for _ in children:
            pid, status = os.wait()
            i, out = children[pid]
            records[i] = _collect(out, shares[i], status)
            for record in records[i]:
                if on_done:
                    on_done(record)
    by_cell = {}
    for i, share in enumerate(shares):
        for cell, record in zip(share, records[i]):
            by_cell[id(cell)] = record
    return [by_cell[id(cell)] for cell in cells]


def _collect(out_path, share, status) -> list:
    if os.path.exists(out_path):
        with open(out_path) as fh:
            return json.load(fh)
    why = f"worker process ended with status {status} without a result"
    return [{**cell, "error": why} for cell in share]
