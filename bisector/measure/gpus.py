"""GPUs for one probe each: which exist, and a pool handing one to each running probe."""
from __future__ import annotations

import contextlib
import os
import queue
import shutil
import subprocess
from typing import Iterator, Optional


def detect_gpus() -> list[str]:
    """GPU ids for one probe each: CUDA_VISIBLE_DEVICES when set, else ``nvidia-smi -L``, else none."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_gpu_list(out)


def parse_gpu_list(text: str) -> list[str]:
    """GPU indices from ``nvidia-smi -L`` output ("GPU 0: NVIDIA H100 (UUID: ...)")."""
    return [ln.split(":", 1)[0].split()[1] for ln in text.splitlines() if ln.startswith("GPU ") and ":" in ln]


class GpuPool:
    """Hands each concurrently running probe its own GPU (as CUDA_VISIBLE_DEVICES)."""

    def __init__(self, gpus: list[str]):
        self.gpus = list(gpus)
        self._free: queue.Queue = queue.Queue()
        for gpu in self.gpus:
            self._free.put(gpu)

    @contextlib.contextmanager
    def slot(self) -> Iterator[Optional[str]]:
        """A GPU id for the duration of one probe run (None when there are no GPUs)."""
        if not self.gpus:
            yield None
            return
        gpu = self._free.get()
        try:
            yield gpu
        finally:
            self._free.put(gpu)


def effective_jobs(jobs: int, gpus: list[str]) -> int:
    """Probes at once: one per GPU when there are GPUs, else bounded by the CPU cores."""
    bound = len(gpus) if gpus else (os.cpu_count() or 1)
    return max(1, min(jobs, bound))
