"""GPUs for one probe each: which exist (by UUID, MIG instances kept), what each one is (model,
memory, driver: its identity in the store key), and a pool handing one to each running probe.

A GPU is named for ``CUDA_VISIBLE_DEVICES`` by its UUID (``GPU-...``, or ``MIG-...`` for a MIG
instance), which stays right whatever order the driver enumerates devices in. Listed by
``nvidia-smi`` (``-L`` for the UUIDs and MIG instances, ``--query-gpu`` for memory and driver), else
by NVML through ``pynvml`` (nvidia-ml-py; MIG instances too), else none. A GPU split into MIG
instances is replaced by its instances, named as torch and NVML name them (``<model> MIG 3g.40gb``:
the profile says the slice's memory). With ``CUDA_VISIBLE_DEVICES`` set, its entries are the GPUs,
as given, each identified by UUID or index in that listing ("unidentified" where it has no match:
the store key then says only ``cuda``, and cannot tell one GPU model from another).
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
_MIG_LINE = re.compile(r"^\s+MIG (\S+)\s+Device\s+\d+: \(UUID: (MIG-[^)]+)\)")
QUERY = ["--query-gpu=uuid,memory.total,driver_version", "--format=csv,noheader,nounits"]
UNIDENTIFIED = "unidentified"
UNKNOWN_MODEL = "cuda"
SMI_TIMEOUT_S = 30


class Gpu(BaseModel):
    """One schedulable GPU: ``id`` is what CUDA_VISIBLE_DEVICES takes; ``name`` its model,
    ``memory_mib`` its memory (None for a MIG instance: its profile in the name says it), ``driver``
    the driver version; ``index`` the driver's index of a whole GPU (None for a MIG instance)."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str = UNIDENTIFIED
    memory_mib: Optional[int] = None
    driver: Optional[str] = None
    index: Optional[int] = None

    @property
    def identified(self) -> bool:
        """Whether the model is known (else only the id is)."""
        return self.name != UNIDENTIFIED

    @property
    def identity(self) -> str:
        """What the store key says of this GPU: model, memory and driver (``cuda`` for a GPU of
        unknown model, as the key always said and as the Ray executor says for one)."""
        if not self.identified:
            return UNKNOWN_MODEL
        parts = [self.name] + ([f"{self.memory_mib} MiB"] if self.memory_mib else [])
        return ", ".join(parts + ([f"driver {self.driver}"] if self.driver else []))


Listing = list[tuple[Gpu, list[Gpu]]]   # whole GPUs, each with its MIG instances


def parse_gpu_list(text: str, query: str = "") -> list[Gpu]:
    """Schedulable GPUs from ``nvidia-smi -L`` output (and ``--query-gpu`` output for memory and
    driver): by UUID; a GPU with MIG instances gives its instances."""
    return schedulable(_parse_listing(text, query))


def _parse_query(text: str) -> dict[str, tuple[Optional[int], Optional[str]]]:
    """uuid -> (memory MiB, driver) from ``nvidia-smi --query-gpu=uuid,memory.total,driver_version``."""
    out = {}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 3 and fields[0].startswith("GPU-"):
            out[fields[0]] = (int(fields[1]) if fields[1].isdigit() else None, fields[2] or None)
    return out


def _parse_listing(text: str, query: str) -> Listing:
    facts = _parse_query(query)
    listing: Listing = []
    for line in text.splitlines():
        gpu, mig = _GPU_LINE.match(line), _MIG_LINE.match(line)
        if gpu:
            memory, driver = facts.get(gpu[3], (None, None))
            listing.append((Gpu(id=gpu[3], name=gpu[2].strip(), memory_mib=memory, driver=driver,
                                index=int(gpu[1])), []))
        elif mig and listing:
            parent = listing[-1][0]
            listing[-1][1].append(Gpu(id=mig[2], name=f"{parent.name} MIG {mig[1]}", driver=parent.driver))
    return listing


def schedulable(listing: Listing) -> list[Gpu]:
    """What probes run on: each whole GPU, or its MIG instances where it has some."""
    return [g for parent, migs in listing for g in (migs or [parent])]


def _smi_listing() -> Optional[Listing]:
    """The listing from nvidia-smi, or None where it is missing or fails."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        names = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
        query = subprocess.run(["nvidia-smi", *QUERY], capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return _parse_listing(names.stdout, query.stdout) if names.returncode == 0 else None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_migs(nvml, handle, parent: Gpu) -> list[Gpu]:
    """The MIG instances of a GPU in MIG mode (none for a GPU without MIG or an NVML without it)."""
    try:
        if not nvml.nvmlDeviceGetMigMode(handle)[0]:
            return []
        count = nvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    except Exception:  # noqa: BLE001 - a GPU or NVML without MIG support
        return []
    migs = []
    for i in range(count):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        except Exception:  # noqa: BLE001 - NVML_ERROR_NOT_FOUND: no instance in this slot
            continue
        migs.append(Gpu(id=_text(nvml.nvmlDeviceGetUUID(mig)), name=_text(nvml.nvmlDeviceGetName(mig)),
                        driver=parent.driver))
    return migs


def _nvml_listing() -> Optional[Listing]:
    """The listing through NVML when nvidia-smi is missing (None without pynvml or a driver)."""
    try:
        import pynvml  # optional: nvidia-ml-py

        pynvml.nvmlInit()
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        listing: Listing = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpu = Gpu(id=_text(pynvml.nvmlDeviceGetUUID(handle)), name=_text(pynvml.nvmlDeviceGetName(handle)),
                      memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) >> 20, driver=driver, index=i)
            listing.append((gpu, _nvml_migs(pynvml, handle, gpu)))
        return listing
    except Exception:  # noqa: BLE001 - no pynvml, no driver, no GPU: none
        return None


def _visible(entries: list[str], listing: Listing) -> list[Gpu]:
    """CUDA_VISIBLE_DEVICES entries as GPUs: each as given, identified by UUID (with or without its
    prefix) or by the driver's index of a whole GPU without MIG instances."""
    known = {g.id: g for parent, migs in listing for g in (parent, *migs)}
    known.update({g.id.split("-", 1)[1]: g for g in list(known.values())})
    known.update({str(parent.index): parent for parent, migs in listing if not migs and parent.index is not None})
    return [known[e].model_copy(update={"id": e}) if e in known else Gpu(id=e) for e in entries]


def detect_gpus() -> list[Gpu]:
    """The GPUs probes may use, one probe each (see the module docstring)."""
    listing = _smi_listing()
    if listing is None:
        listing = _nvml_listing() or []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return _visible([g.strip() for g in visible.split(",") if g.strip() and g.strip() != "-1"], listing)
    return schedulable(listing)


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
        """What a measurement's store key says it ran on: 'cpu', or 'cuda:' and the identity (model,
        memory, driver) of the pool's GPUs."""
        if not self.gpus:
            return "cpu"
        return "cuda:" + "+".join(sorted({g.identity for g in self.gpus}))

    @property
    def names(self) -> frozenset[str]:
        """The GPU models a probe may run on here (empty when one of them is unidentified)."""
        if not all(g.identified for g in self.gpus):
            return frozenset()
        return frozenset(g.name for g in self.gpus)

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



_RUNTIME_PACKAGE = re.compile(r"^nvidia-cuda-runtime(-cu\d+)?$")
_LOCAL_LABEL = re.compile(r"\+(cu|rocm)([\d.]+)$")


def cuda_runtime(provided: dict[str, str]) -> str:
    """The CUDA runtime an environment's torch runs on, from the base's packages (canonical name ->
    version): nvidia-cuda-runtime's major.minor, else torch's local label (``+cu121``: 12.1, ``+rocm6.2``:
    rocm 6.2), else 'none' for a CPU build and 'unknown' for a torch that says nothing."""
    for name, version in sorted(provided.items()):
        if _RUNTIME_PACKAGE.match(name):
            return ".".join(version.split(".")[:2])
    torch = provided.get("torch", "")
    label = _LOCAL_LABEL.search(torch)
    if label and label[1] == "cu":
        return f"{label[2][:-1]}.{label[2][-1]}"
    if label:
        return f"rocm {label[2]}"
    return "none" if torch.endswith("+cpu") else "unknown"


def effective_jobs(jobs: int, gpus: list) -> int:
    """Probes at once: one per GPU when there are GPUs, else bounded by the CPU cores."""
    bound = len(gpus) if gpus else (os.cpu_count() or 1)
    return max(1, min(jobs, bound))


def probe_cpus(jobs: int, gpus: list) -> int:
    """Cores one CPU probe may use (its cells in parallel): the cores shared by the probes at once."""
    if gpus:
        return 1
    return max(1, (os.cpu_count() or 1) // effective_jobs(jobs, gpus))
