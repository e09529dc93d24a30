"""GPUs for one probe each: which exist (by UUID, MIG instances kept), and a pool handing one to
each running probe.

A GPU is named for ``CUDA_VISIBLE_DEVICES`` by its UUID (``GPU-...``, or ``MIG-...`` for a MIG
instance), which stays right whatever order the driver enumerates devices in. Found, in order:
``CUDA_VISIBLE_DEVICES`` when set (its entries as given), ``nvidia-smi -L`` (a GPU split into MIG
instances is replaced by its instances), NVML through ``pynvml`` (nvidia-ml-py), else none.
"""
from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import subprocess
from typing import Iterator, Optional

from pydantic import BaseModel, ConfigDict

_GPU_LINE = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[^)]+)\)")
_MIG_LINE = re.compile(r"^\s+MIG .*\(UUID: (MIG-[^)]+)\)")


class Gpu(BaseModel):
    """One schedulable GPU: ``id`` is what CUDA_VISIBLE_DEVICES takes, ``name`` its model."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str = "cuda"


def parse_gpu_list(text: str) -> list[Gpu]:
    """GPUs from ``nvidia-smi -L`` output: by UUID; a GPU with MIG instances gives its instances."""
    gpus: list[tuple[Gpu, list[Gpu]]] = []
    for line in text.splitlines():
        gpu, mig = _GPU_LINE.match(line), _MIG_LINE.match(line)
        if gpu:
            gpus.append((Gpu(id=gpu[3], name=gpu[2].strip()), []))
        elif mig and gpus:
            parent = gpus[-1][0]
            gpus[-1][1].append(Gpu(id=mig[1], name=f"{parent.name} MIG"))
    return [g for parent, migs in gpus for g in (migs or [parent])]


def _nvml_gpus() -> list[Gpu]:
    """GPUs through NVML when nvidia-smi is missing (empty without pynvml or a driver)."""
    try:
        import pynvml  # optional: nvidia-ml-py

        pynvml.nvmlInit()
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid, name = pynvml.nvmlDeviceGetUUID(handle), pynvml.nvmlDeviceGetName(handle)
            decode = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731
            found.append(Gpu(id=decode(uuid), name=decode(name)))
        return found
    except Exception:  # noqa: BLE001 - no pynvml, no driver, no GPU: none
        return []


def detect_gpus() -> list[Gpu]:
    """The GPUs probes may use, one probe each (see the module docstring for the order)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [Gpu(id=g.strip()) for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
            return parse_gpu_list(out)
        except (OSError, subprocess.TimeoutExpired):
            pass
    return _nvml_gpus()


class GpuPool:
    """Hands each concurrently running probe its own GPU (as CUDA_VISIBLE_DEVICES)."""

    def __init__(self, gpus: list):
        self.gpus = [g if isinstance(g, Gpu) else Gpu(id=str(g)) for g in gpus]
        self._free: queue.Queue = queue.Queue()
        for gpu in self.gpus:
            self._free.put(gpu)

    @property
    def device(self) -> str:
        """The device probes run on: 'cuda' with GPUs, else 'cpu'."""
        return "cuda" if self.gpus else "cpu"

    @property
    def kind(self) -> str:
        """What a measurement's store key says it ran on: 'cpu', or 'cuda:' and the GPU model(s)."""
        if not self.gpus:
            return "cpu"
        return "cuda:" + "+".join(sorted({g.name for g in self.gpus}))

    @contextlib.contextmanager
    def slot(self) -> Iterator[Optional[Gpu]]:
        """A GPU for the duration of one probe run (None when there are no GPUs)."""
        if not self.gpus:
            yield None
            return
        gpu = self._free.get()
        try:
            yield gpu
        finally:
            self._free.put(gpu)


def effective_jobs(jobs: int, gpus: list) -> int:
    """Probes at once: one per GPU when there are GPUs, else bounded by the CPU cores."""
    bound = len(gpus) if gpus else (os.cpu_count() or 1)
    return max(1, min(jobs, bound))


def probe_cpus(jobs: int, gpus: list) -> int:
    """Cores one CPU probe may use (its cells in parallel): the cores shared by the probes at once."""
    if gpus:
        return 1
    return max(1, (os.cpu_count() or 1) // effective_jobs(jobs, gpus))
