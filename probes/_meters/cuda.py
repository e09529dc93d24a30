"""CUDA meter: the caching allocator's counters, plus NVML's device-wide view of the same GPU.

Per phase it reads ``max_memory_allocated`` / ``max_memory_reserved`` and the peak of the bytes
tensors asked for (``requested_bytes.all.peak``: allocated bytes are rounded up to 512 B blocks,
requested ones are not), then resets the peak counters; the window peak is the maximum over
phases. ``reset="window"`` resets only when the window opens, for the cross-check that the two
ways give the same peak; each cell records the mode its meter ran in (``cuda_reset``), so a run can
prove the flag reached the meter (in window mode every phase's peak is the running maximum).

NVML (``pynvml`` from nvidia-ml-py) is optional. It ignores ``CUDA_VISIBLE_DEVICES``, so the
device is found by the UUID torch reports for the visible device 0 (``GPU-...`` or, for a MIG
instance, ``MIG-...``), never by index 0. Its figure is the memory used on the whole device by
every process (CUDA context included), sampled at phase marks: not a peak, and named so.
``backend`` stands in for ``torch.cuda`` so the bookkeeping runs without a GPU.
"""
from __future__ import annotations

from .phases import MeterBase

REQUESTED_PEAK = "requested_bytes.all.peak"


def _load_nvml():
    """(pynvml module initialised, None) or (None, why not)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, None
    except Exception as exc:  # noqa: BLE001 - optional dependency, any failure means "no NVML"
        return None, f"{type(exc).__name__}: {exc}"


def uuid_candidates(uuid) -> list:
    """NVML spellings of a torch device UUID: as given when prefixed, else ``GPU-`` then ``MIG-``."""
    text = str(uuid).strip()
    if text.startswith(("GPU-", "MIG-")):
        return [text]
    return [f"GPU-{text}", f"MIG-{text}"]


def window_counters(cuda, device) -> dict:
    """The caching allocator's counters for a window that ends now (synchronised first), its peaks then reset
    for the next: peak and end allocated / reserved bytes (the command meter's per-step reading)."""
    cuda.synchronize(device)
    out = {"peak_allocated": int(cuda.max_memory_allocated(device)),
           "peak_reserved": int(cuda.max_memory_reserved(device)),
           "end_allocated": int(cuda.memory_allocated(device)), "end_reserved": int(cuda.memory_reserved(device))}
    cuda.reset_peak_memory_stats(device)
    return out


def visible_uuid():
    """The UUID of the visible CUDA device 0 as torch reports it, or None."""
    try:
        import torch

        return getattr(torch.cuda.get_device_properties(0), "uuid", None)
    except Exception:  # noqa: BLE001 - no CUDA, or a torch without the property
        return None


class NvmlProbe:
    """Device-wide used bytes and driver version through NVML, for the GPU with ``uuid``.

    ``nvml`` is the pynvml module (``"auto"``: import it). ``unavailable`` says why there is no
    reading (no pynvml, no device with that UUID, no UUID), so the result can say so.
    """

    def __init__(self, uuid="auto", nvml="auto"):
        self._nvml, self.unavailable = _load_nvml() if nvml == "auto" else (nvml, None)
        self._handle, self.uuid = None, None
        uuid = visible_uuid() if uuid == "auto" else uuid
        if self._nvml is None:
            return
        if uuid is None:
            self.unavailable = "torch reports no UUID for the visible device"
            return
        for spelling in uuid_candidates(uuid):
            try:
                self._handle = self._nvml.nvmlDeviceGetHandleByUUID(spelling)
                self.uuid = spelling
                return
            except Exception:  # noqa: BLE001 - try the next spelling
                continue
        self.unavailable = f"NVML has no device with UUID {uuid}"

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

    def mig_mode(self):
        """'on' / 'off' for the device (None when NVML cannot tell)."""
        if self._handle is None:
            return None
        try:
            current, _ = self._nvml.nvmlDeviceGetMigMode(self._handle)
            return "on" if current else "off"
        except Exception:  # noqa: BLE001 - MIG instances and older GPUs do not answer
            return "instance" if (self.uuid or "").startswith("MIG-") else None


class CudaMeter(MeterBase):
    """Peak allocated / reserved / requested bytes per phase from ``torch.cuda`` memory statistics."""

    kind = "cuda"

    def __init__(self, device=None, backend=None, nvml=None, reset="phase"):
        MeterBase.__init__(self)
        if backend is None:
            import torch

            backend = torch.cuda
        self.cuda, self.device, self.reset_mode = backend, device, reset
        self.nvml = nvml if nvml is not None else NvmlProbe()
        self._reserved_peak = self._requested_peak = 0
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
        if self.reset_mode == "phase" or self._phase is None:
            self.cuda.reset_peak_memory_stats(self.device)

    def _read_phase_peak(self):
        self.cuda.synchronize(self.device)
        self._reserved_peak = max(self._reserved_peak, int(self.cuda.max_memory_reserved(self.device)))
        stats = self.cuda.memory_stats(self.device)
        self._requested_peak = max(self._requested_peak, int(stats.get(REQUESTED_PEAK, 0)))
        return int(self.cuda.max_memory_allocated(self.device))

    def reset_peak(self):
        self._reserved_peak = self._requested_peak = 0
        self._nvml_max = None
        self._phase = None
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
            "cuda_reset": self.reset_mode,
            "reserved_peak_bytes": self._reserved_peak,
            "requested_peak_bytes": self._requested_peak,
            "reserved_bytes": int(self.cuda.memory_reserved(self.device)),
        }
        if self._nvml_max is not None:
            out["nvml_device_used_at_marks_max_bytes"] = self._nvml_max
        else:
            out["nvml_unavailable"] = getattr(self.nvml, "unavailable", None) or "no reading"
        return out
