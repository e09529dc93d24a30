"""The GPU pool: one GPU per concurrently running probe; job bounds."""
from __future__ import annotations

import os
import threading
import time

from bisector.measure.gpus import GpuPool, effective_jobs


def test_pool_never_hands_one_gpu_to_two_probes():
    pool, held, clashes = GpuPool(["0", "1"]), set(), []
    lock = threading.Lock()

    def probe():
        with pool.slot() as gpu:
            with lock:
                if gpu in held:
                    clashes.append(gpu)
                held.add(gpu)
            time.sleep(0.01)
            with lock:
                held.discard(gpu)

    threads = [threading.Thread(target=probe) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clashes == []


def test_no_gpus_means_no_slot_and_cpu_bound_jobs():
    with GpuPool([]).slot() as gpu:
        assert gpu is None
    assert effective_jobs(8, ["0", "1", "2"]) == 3
    assert effective_jobs(1, []) == 1
    assert effective_jobs(10_000, []) == (os.cpu_count() or 1)   # no GPUs: bounded by the cores
    assert effective_jobs(0, ["0"]) == 1                         # never fewer than one
