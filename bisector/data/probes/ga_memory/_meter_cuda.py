"""CUDA meter: the caching allocator's counters plus NVML's device-wide view.

Per phase it reads ``max_memory_allocated`` / ``max_memory_reserved`` and resets the peak
counters; the window peak is the maximum over phases. NVML (``pynvml`` from nvidia-ml-py) is
optional: when importable, the device-wide used memory is sampled at the end of each phase.
``backend`` stands in for ``torch.cuda`` so the bookkeeping is testable without a GPU.
"""
from __future__ import annotations

from _meter_base import MeterBase


def _load_nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - optional dependency, any failure means "no NVML"
        return None


class NvmlProbe:
    """Device-wide used bytes and driver version through NVML (None when unavailable)."""

    def __init__(self, index=0, nvml="auto"):
        self._nvml = _load_nvml() if nvml == "auto" else nvml
        self._handle = None
        if self._nvml is not None:
            try:
                self._handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
            except Exception:  # noqa: BLE001
                self._nvml = None

    def used_bytes(self):
        """Used memory on the whole device (all processes), or None."""
        if self._handle is None:
            return None
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def driver(self):
        """Driver version string, or None."""
        if self._nvml is None:
            return None
        value = self._nvml.nvmlSystemGetDriverVersion()
        return value.decode() if isinstance(value, bytes) else str(value)


class CudaMeter(MeterBase):
    """Peak allocated/reserved bytes per phase from ``torch.cuda`` memory statistics."""

    kind = "cuda"

    def __init__(self, device=None, backend=None, nvml=None):
        MeterBase.__init__(self)
        if backend is None:
            import torch

            backend = torch.cuda
        self.cuda = backend
        self.device = device
        self.nvml = nvml if nvml is not None else NvmlProbe()
        self._reserved_peak = 0
        self._nvml_max = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def track(self, tensors, site=None):
        """Nothing to do: the allocator already counts every tensor."""

    def close(self):
        """Nothing to release."""

    @property
    def current(self) -> int:
        self.cuda.synchronize(self.device)
        return int(self.cuda.memory_allocated(self.device))

    def _open_phase_peak(self):
        self.cuda.synchronize(self.device)
        self.cuda.reset_peak_memory_stats(self.device)

    def _read_phase_peak(self):
        self.cuda.synchronize(self.device)
        self._reserved_peak = max(self._reserved_peak, int(self.cuda.max_memory_reserved(self.device)))
        return int(self.cuda.max_memory_allocated(self.device))

    def reset_peak(self):
        self._reserved_peak = 0
        self._nvml_max = None
        MeterBase.reset_peak(self)

    def mark(self, name):
        MeterBase.mark(self, name)
        used = self.nvml.used_bytes()
        if used is not None:
            self._nvml_max = used if self._nvml_max is None else max(self._nvml_max, used)

    def attribution(self, top=12):
        """Not available from allocator counters."""
        return []

    def phase_attribution(self, top=12):
        """Not available from allocator counters."""
        return {}

    def extra(self):
        out = {
            "reserved_peak_bytes": self._reserved_peak,
            "reserved_bytes": int(self.cuda.memory_reserved(self.device)),
        }
        if self._nvml_max is not None:
            out["nvml_used_max_bytes"] = self._nvml_max
        return out
