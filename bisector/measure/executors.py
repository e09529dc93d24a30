"""The executor seam: how measurements are taken, whatever runs them. Three verbs: submit, wait for
any, cancel.

``local`` (the default) takes each measurement in a thread of this process, one probe per GPU
through a :class:`~bisector.measure.gpus.GpuPool`. ``ray`` (bisector.measure.ray_executor) takes
each one as a Ray task on a cluster's node. Either way the task only *takes* the measurement:
the ``on_done`` hook given to :meth:`Executor.submit` runs in this process the moment it returns
(the measurer stores it there), so the driver stays the only writer of the store.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
from typing import Callable, Collection, Iterator, Optional, Protocol

from bisector.console import activity
from bisector.core.measurement import Measurement
from bisector.envs import EnvManager
from bisector.errors import EnvironmentFailure
from bisector.measure.gpus import GpuPool
from bisector.measure.take import TakeJob, probe_environment, take_measurement, warm_identity
from bisector.measure.warm_pool import WarmPool

OnDone = Callable[[Measurement], Measurement]



class Handle:
    """One submitted measurement: its store key, whether it is speculative (a likely next midpoint
    taken on a spare slot), and the future of the measurement as ``on_done`` returned it."""

    def __init__(self, job: TakeJob, speculative: bool = False):
        self.job, self.key, self.speculative = job, job.base.key, speculative
        self.future: cf.Future = cf.Future()
        self.inner: Optional[cf.Future] = None  # the local executor's thread future

    def done(self) -> bool:
        """The measurement arrived (or the task failed or was cancelled)."""
        return self.future.done()

    def result(self) -> Measurement:
        """The measurement (raises what the task raised, e.g. Interrupted)."""
        return self.future.result()


class Executor(Protocol):
    """Takes measurements somewhere: ``device`` and ``kind`` say what they run on (``kind`` goes into the
    store key, ``gpu_names`` are the GPU models a CUDA result must name), ``slots`` how many run at
    once, ``speculates`` whether spare slots probe ahead."""

    device: str
    kind: str
    gpu_names: frozenset[str]  # the GPU models its probes run on (empty: not known here)
    slots: int
    speculates: bool
    builds_here: bool  # environments are built in this process's cache (so prefetching them here helps)

    def submit(self, job: TakeJob, on_done: OnDone, speculative: bool = False) -> Handle:
        """Start taking ``job``'s measurement; ``on_done`` gets it here the moment it returns."""

    def wait_any(self, handles: Collection[Handle], timeout: Optional[float] = None) -> list[Handle]:
        """The handles that are done, once at least one is (or [] after ``timeout``)."""

    def cancel(self, handle: Handle) -> None:
        """Stop a measurement that no longer matters (one that already returned stays stored)."""

    def prewarm(self, jobs: list[TakeJob]) -> None:
        """Have what these jobs' probes run in ready, together, before they are taken (their environments
        and warm workers, where this executor has them); returns when they are."""

    def close(self) -> None:
        """Cancel what is still running and release the executor's resources."""


def wait_any(handles: Collection[Handle], timeout: Optional[float] = None) -> list[Handle]:
    """Block until one of ``handles`` is done (or ``timeout``); the done ones."""
    done, _ = cf.wait([h.future for h in handles], timeout=timeout, return_when=cf.FIRST_COMPLETED)
    return [h for h in handles if h.future in done]


class LocalExecutor:
    """Measurements in threads of this process, one probe per GPU of ``gpus`` (environments build
    without holding one); ``slots``: one per GPU, else one per core."""

    speculates = False  # spare cores prebuild the next environments instead (the measurer's prefetch)
    builds_here = True

    def __init__(self, envs: EnvManager, gpus: GpuPool, threads: int = 32, warm: bool = True):
        self.envs, self.gpus = envs, gpus
        self.device, self.kind, self.gpu_names = self.gpus.device, self.gpus.kind, self.gpus.names
        self.slots = len(self.gpus.gpus) or (os.cpu_count() or 1)
        self._pool = cf.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bisector-measure")
        self.warm = WarmPool(capacity=self.slots + 1, enabled=warm)  # built-in probes fork from warm workers

    def submit(self, job: TakeJob, on_done: OnDone, speculative: bool = False) -> Handle:
        handle = Handle(job, speculative)
        inner = self._pool.submit(lambda: on_done(take_measurement(self.envs, job, lambda: _gpu_id(self.gpus),
                                                                   warm=self.warm)))
        inner.add_done_callback(lambda f: _settle(handle.future, f))
        handle.inner = inner
        return handle

    def wait_any(self, handles: Collection[Handle], timeout: Optional[float] = None) -> list[Handle]:
        return wait_any(handles, timeout)

    def cancel(self, handle: Handle) -> None:
        if handle.inner is not None and handle.inner.cancel():
            handle.future.cancel()

    def prewarm(self, jobs: list[TakeJob]) -> None:
        """Start the warm workers of the jobs' built environments, all at once, and wait until they are
        ready: interleaved samples then each cost a fork, and two workers' imports overlap on two cores.
        An environment not built yet is left to its measurement (which builds it, and records a failure
        once), its worker started by its first run."""
        jobs = [job for job in jobs if self.warm.serves(job.probe) and self.envs.is_ready(job.recipe)]
        for future in [self._pool.submit(self._prewarm, job) for job in jobs]:
            future.result()

    def _prewarm(self, job: TakeJob) -> None:
        with activity.doing(job.label or f"{job.base.package} {job.base.candidate}", kind="measure"):
            activity.update("warm worker")
            try:
                with self.envs.using(job.recipe) as env:
                    self.warm.start(job.probe, env.python, probe_environment(job, env), warm_identity(env))
            except EnvironmentFailure:
                pass  # removed meanwhile, and now broken: its measurement records it

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.warm.close()


def _settle(target: cf.Future, source: cf.Future) -> None:
    """Copy how ``source`` ended onto ``target``."""
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())


@contextlib.contextmanager
def _gpu_id(pool: GpuPool) -> Iterator[Optional[str]]:
    """A GpuPool slot as its GPU's CUDA_VISIBLE_DEVICES id (None without GPUs)."""
    with pool.slot() as gpu:
        yield gpu.id if gpu is not None else None
