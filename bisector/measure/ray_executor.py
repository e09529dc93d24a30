"""The ``ray`` executor: each measurement, environment build included, is one Ray task asking for one
GPU (Ray sets its CUDA_VISIBLE_DEVICES), or one CPU when the cluster has no GPUs.

The driver keeps at most ``slots`` tasks in Ray at once, real ones before speculative ones, so a
likely-next midpoint never delays a measurement the search is waiting for. A task returns JSON
(:class:`~bisector.measure.ray_task.TaskResult`); the environment fingerprint and the versions the
node's health check proved are checked here, so a wrong environment on any node is a SKIP. A worker
or node that dies, or a lost object, sends the task to another node (``retries`` times at most,
never a verdict); when every retry is spent the measurement is a LOST SKIP with the reason.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Collection, Optional

import ray
import ray.exceptions as rex
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from bisector.core.measurement import Measurement, Status
from bisector.core.requirements import same_version
from bisector.envs import index_environment
from bisector.measure.executors import Handle, OnDone, wait_any
from bisector.measure.ray_task import TaskPayload, TaskResult, probe_files, take_on_node
from bisector.measure.take import TakeJob
from bisector.process.procs import Interrupted

# A task lost with its worker, its node or its objects: retried elsewhere, never a verdict.
LOST = (rex.WorkerCrashedError, rex.NodeDiedError, rex.ObjectLostError, rex.LocalRayletDiedError,
        rex.RaySystemError, rex.OutOfMemoryError, rex.RuntimeEnvSetupError, rex.TaskUnschedulableError)
POLL_S = 0.05
TRACKER = "bisector-tracker"
log = logging.getLogger("bisector.ray")


@ray.remote(num_cpus=0)
class _Tracker:
    """Where each attempt started (so a retry can avoid the node that lost it)."""

    def __init__(self):
        self.where: dict[str, str] = {}

    def started(self, attempt: str, node: str) -> None:
        self.where[attempt] = node

    def node(self, attempt: str) -> Optional[str]:
        return self.where.get(attempt)


@ray.remote(max_retries=0)
def _task(payload: str, files: str, tracker, attempt: str) -> str:
    """One measurement on whichever node Ray chose."""
    node = ray.get_runtime_context().get_node_id()
    tracker.started.remote(attempt, node)
    return take_on_node(payload, files, node, [str(g) for g in ray.get_gpu_ids()])


class _Attempt:
    """One try of a handle's task: its number, the nodes to avoid, its object ref once dispatched."""

    def __init__(self, handle: Handle, on_done: OnDone, number: int = 0, avoid: frozenset = frozenset()):
        self.handle, self.on_done, self.number, self.avoid = handle, on_done, number, avoid
        self.ref = None
        self.errors: list[str] = []
        self.token = uuid.uuid4().hex[:12]

    @property
    def name(self) -> str:
        return f"{self.handle.key}:{self.token}:{self.number}"


def accelerator_kind(resources: dict) -> str:
    """The store key's device kind of a Ray cluster: its GPU models (Ray's ``accelerator_type:``
    resources), or ``cuda:cuda`` for GPUs of unknown model, as for GPUs named only by their id."""
    models = sorted(k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:"))
    return "cuda:" + ("+".join(models) or "cuda")


class RayExecutor:
    """Measurements as Ray tasks (see the module docstring); ``address`` None starts a local Ray,
    ``auto`` joins the running cluster, else ``ray.init``'s address."""

    speculates = True
    builds_here = False  # each node builds in its own cache
    gpu_names: frozenset[str] = frozenset()  # the nodes' GPU models are not known here

    def __init__(self, address: Optional[str] = None, retries: int = 2, cache_dir: Optional[str] = None):
        self._owned = not ray.is_initialized()
        if self._owned:
            ray.init(address=address or "local", include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        self.device = "cuda" if gpus else "cpu"
        self.kind = accelerator_kind(resources) if gpus else "cpu"
        self.slots = max(1, gpus or int(resources.get("CPU", 1)))
        self.retries, self.cache_dir = retries, cache_dir
        self._resources = {"num_gpus": 1, "num_cpus": 1} if gpus else {"num_cpus": 1}
        env_vars = index_environment()  # the driver's installer settings: the nodes resolve as it does
        self._runtime_env = {"env_vars": env_vars} if env_vars else None
        self._tracker = _Tracker.options(name=TRACKER, get_if_exists=True).remote()  # one per driver
        self._files: dict[str, ray.ObjectRef] = {}
        self._queue: list[_Attempt] = []
        self._running: dict[ray.ObjectRef, _Attempt] = {}
        self._lock = threading.RLock()
        self._closed = False
        self._loop: Optional[threading.Thread] = None  # the collector, running while tasks are out

    # -- the seam -----------------------------------------------------------------------------
    def submit(self, job: TakeJob, on_done: OnDone, speculative: bool = False) -> Handle:
        handle = Handle(job, speculative)
        with self._lock:
            self._queue.append(_Attempt(handle, on_done))
            self._dispatch()
        return handle

    def wait_any(self, handles: Collection[Handle], timeout: Optional[float] = None) -> list[Handle]:
        return wait_any(handles, timeout)

    def prewarm(self, jobs: list[TakeJob]) -> None:
        """Nothing to ready here: each task builds its environment and runs its probe on its node."""

    def cancel(self, handle: Handle) -> None:
        with self._lock:
            queued = [a for a in self._queue if a.handle is handle]
            for a in queued:
                self._queue.remove(a)
            refs = [a.ref for a in self._running.values() if a.handle is handle]
        if queued:  # outside the lock: the future's callbacks take the measurer's
            handle.future.cancel()
        for ref in refs:  # the task stops its probe; a result that already arrived is still stored
            ray.cancel(ref)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            queued, self._queue = self._queue, []
            refs = list(self._running)
        for a in queued:
            a.handle.future.cancel()
        for ref in refs:
            ray.cancel(ref)
        loop = self._loop
        if loop is not None and loop is not threading.current_thread():
            loop.join(timeout=5)  # it stops touching Ray before Ray goes
        if self._owned and ray.is_initialized():
            ray.shutdown()

    # -- dispatch and collection ---------------------------------------------------------------
    def _dispatch(self) -> None:
        """Start queued attempts while slots are free: real measurements first, then speculative ones."""
        with self._lock:
            self._queue.sort(key=lambda a: a.handle.speculative)  # stable: FIFO within each class
            while self._queue and len(self._running) < self.slots and not self._closed:
                attempt = self._queue.pop(0)
                attempt.ref = self._start(attempt)
                self._running[attempt.ref] = attempt
            if self._running and self._loop is None:
                self._loop = threading.Thread(target=self._collect, name="bisector-ray", daemon=True)
                self._loop.start()

    def _start(self, attempt: _Attempt):
        job = attempt.handle.job
        payload = TaskPayload(job=job, cache_dir=self.cache_dir).model_dump_json()
        options = dict(self._resources, scheduling_strategy=self._strategy(attempt.avoid))
        if self._runtime_env:
            options["runtime_env"] = self._runtime_env
        return _task.options(**options).remote(payload, self._probe_ref(job), self._tracker, attempt.name)

    def _probe_ref(self, job: TakeJob):
        """The probe's files, put into the object store once per probe."""
        key = job.probe.model_dump_json()
        if key not in self._files:
            self._files[key] = ray.put(probe_files(job.probe).model_dump_json())
        return self._files[key]

    def _strategy(self, avoid: frozenset):
        """Default scheduling, or for a retry a preference for a live node that did not lose it."""
        if not avoid:
            return "DEFAULT"
        need = "GPU" if "num_gpus" in self._resources else "CPU"
        others = [n["NodeID"] for n in ray.nodes()
                  if n.get("Alive") and n["NodeID"] not in avoid and n.get("Resources", {}).get(need, 0) >= 1]
        if not others:
            return "DEFAULT"
        return NodeAffinitySchedulingStrategy(others[0], soft=True)  # waits for it while it lives

    def _collect(self) -> None:
        """The collector thread: each task's result is handed to its ``on_done`` the moment it arrives."""
        while True:
            with self._lock:
                refs = list(self._running)
                if not refs or self._closed:
                    self._loop = None
                    return
            try:
                ready, rest = ray.wait(refs, num_returns=1, timeout=POLL_S)
                if ready and rest:
                    ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            except Exception:  # noqa: BLE001 - Ray going away under us (shutdown): settle below or stop
                if self._closed:
                    return
                log.exception("waiting on Ray tasks failed")
                time.sleep(POLL_S)
                continue
            for ref in ready:
                with self._lock:
                    attempt = self._running.pop(ref, None)
                if attempt is not None:
                    self._finish_safely(attempt)
            with self._lock:
                self._dispatch()

    def _finish_safely(self, attempt: _Attempt) -> None:
        try:
            self._finish(attempt)
        except BaseException as exc:  # noqa: BLE001 - never leave a waiter hanging
            if not attempt.handle.future.done():
                attempt.handle.future.set_exception(exc)

    def _finish(self, attempt: _Attempt) -> None:
        handle = attempt.handle
        try:
            result = TaskResult.model_validate_json(ray.get(attempt.ref))
        except rex.TaskCancelledError:
            handle.future.cancel() or handle.future.set_exception(Interrupted())
            return
        except LOST as exc:
            self._retry(attempt, exc)
            return
        except rex.RayTaskError as exc:  # the task raised on its node (a node being shut down, say)
            result = TaskResult(measurement=_lost(handle.job, f"the task failed on its node: {_first_line(exc)}"))
        m = _verified(handle.job, result)
        if attempt.errors:  # taken on a retry: say what was lost before
            m = m.model_copy(update={"details": {**m.details, "attempts": attempt.number + 1,
                                                 "lost": attempt.errors}})
        self._settle(attempt, m)

    def _settle(self, attempt: _Attempt, m: Measurement) -> None:
        try:
            final = attempt.on_done(m)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the handle
            attempt.handle.future.set_exception(exc)
            return
        if not attempt.handle.future.done():
            attempt.handle.future.set_result(final)

    def _retry(self, attempt: _Attempt, exc: BaseException) -> None:
        """Send a lost task to another node, or give up with a LOST SKIP once ``retries`` are spent."""
        try:
            node = ray.get(self._tracker.node.remote(attempt.name), timeout=10)
        except (rex.RayError, TimeoutError):
            node = None
        errors = [*attempt.errors, f"{type(exc).__name__}" + (f" on node {node[:12]}" if node else "")]
        if attempt.number >= self.retries:
            why = f"lost {len(errors)} times, retries spent: {', '.join(errors)}"
            self._settle(attempt, _lost(attempt.handle.job, why))
            return
        again = _Attempt(attempt.handle, attempt.on_done, attempt.number + 1,
                         attempt.avoid | ({node} if node else set()))
        again.errors = errors
        with self._lock:
            self._queue.insert(0, again)
            self._dispatch()


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "cause", None) or exc).strip().splitlines()
    return text[-1][:300] if text else type(exc).__name__


def _lost(job: TakeJob, why: str) -> Measurement:
    return job.base.model_copy(update={"status": Status.LOST, "reason": why, "seconds": 0.0})


def _verified(job: TakeJob, result: TaskResult) -> Measurement:
    """The node's measurement, unless its environment is not the one the run asked for (a SKIP)."""
    m = result.measurement.model_copy(update={"details": {**result.measurement.details, "node": result.node,
                                                          "gpus": result.gpus}})
    if m.status is Status.ENV_FAILED:
        return m
    target, problem = job.recipe.target, None
    if result.fingerprint != job.recipe.fingerprint:
        problem = f"the node's environment {result.fingerprint} is not the run's {job.recipe.fingerprint}"
    elif result.proved is None:
        problem = "the node did not say what its environment holds"
    elif target.is_commit and result.proved.revision != target.revision:
        problem = f"the node's environment holds revision {result.proved.revision}, not {target.revision}"
    elif not target.is_commit and not same_version(result.proved.version, target.version or ""):
        problem = f"the node's environment holds {target.package} {result.proved.version}, not {target.version}"
    if problem is None:
        return m
    return m.model_copy(update={"status": Status.ENV_FAILED, "metrics": {},
                                "reason": f"node {result.node[:12]}: {problem}"})
