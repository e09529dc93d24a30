"""GPUs: which exist (nvidia-smi, else NVML; MIG instances), what each one is (its identity in the
store key and the report), and the pool: one GPU per concurrently running probe; job bounds."""
from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from bisector.bisection.boundary import environment_facts
from bisector.core.facts import Device, ProbeResult
from bisector.core.candidate import Candidate, CandidateKind
from bisector.envs import EnvManager, EnvSpec
from bisector.measure.gpus import Gpu, GpuPool, cuda_runtime, detect_gpus, effective_jobs
from bisector.measure.executors import LocalExecutor
from bisector.measure.measurer import Measurer
from bisector.job.probe import ScriptProbe
from bisector.store.storage import Store


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


# --- which GPUs, and what each one is -----------------------------------------------------------
# nvidia-smi's output as the driver prints it (R535+): two whole GPUs, the second in MIG mode
SMI_L = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1111)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-2222)
  MIG 3g.20gb     Device  0: (UUID: MIG-aaaa)
  MIG 1g.5gb      Device  1: (UUID: MIG-bbbb)
GPU 2: NVIDIA H200 (UUID: GPU-3333)
"""
SMI_QUERY = """GPU-1111, 81559, 550.54.15
GPU-2222, 40960, 550.54.15
GPU-3333, 143771, 550.54.15
"""


@pytest.fixture
def nvidia_smi(tmp_path, monkeypatch):
    """An ``nvidia-smi`` on PATH answering ``-L`` and ``--query-gpu`` with the recorded output above
    (the driver's tool is the one thing a CPU machine cannot run for real)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "L.txt").write_text(SMI_L)
    (tmp_path / "Q.txt").write_text(SMI_QUERY)
    script = bin_dir / "nvidia-smi"
    script.write_text(f'#!/bin/sh\nif [ "$1" = "-L" ]; then cat {tmp_path}/L.txt; else cat {tmp_path}/Q.txt; fi\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_nvidia_smi_lists_gpus_by_uuid_with_model_memory_driver_and_mig_profiles(nvidia_smi):
    """By UUID, so a probe's GPU is the same whatever order the driver lists them in; MIG instances
    replace their GPU, each named with its profile (as torch and NVML name it)."""
    gpus = detect_gpus()
    assert [g.id for g in gpus] == ["GPU-1111", "MIG-aaaa", "MIG-bbbb", "GPU-3333"]
    assert gpus[0] == Gpu(id="GPU-1111", name="NVIDIA H100 80GB HBM3", memory_mib=81559, driver="550.54.15", index=0)
    assert [g.name for g in gpus[1:3]] == ["NVIDIA A100-SXM4-40GB MIG 3g.20gb", "NVIDIA A100-SXM4-40GB MIG 1g.5gb"]
    assert gpus[3].identity == "NVIDIA H200, 143771 MiB, driver 550.54.15"
    assert gpus[1].identity == "NVIDIA A100-SXM4-40GB MIG 3g.20gb, driver 550.54.15"


def test_cuda_visible_devices_are_identified_by_uuid_or_index(nvidia_smi, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-3333, 0,MIG-bbbb, 7")
    gpus = detect_gpus()
    assert [g.id for g in gpus] == ["GPU-3333", "0", "MIG-bbbb", "7"]   # as given: CUDA reads them so
    assert [g.name for g in gpus] == ["NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
                                      "unidentified"]
    assert GpuPool(gpus).names == frozenset()  # one unidentified GPU: no model can be checked
    assert GpuPool([gpus[3]]).kind == "cuda:cuda"  # as before, and as the Ray executor keys unknown models
    assert GpuPool(gpus[:2]).names == {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect_gpus() == []


class _Nvml:
    """What a GPU's NVML answers, for ``pynvml`` where the machine has no GPU: GPU 0 an H200, GPU 1
    an A100 in MIG mode with instances in slots 0 and 2 of 7."""

    SOURCE = '''
class _Mem:
    def __init__(self, total):
        self.total = total

GPUS = [("GPU-1111", b"NVIDIA H200", 150754820096, None),
        ("GPU-2222", b"NVIDIA A100-SXM4-40GB", 42949672960,
         {0: ("MIG-aaaa", b"NVIDIA A100-SXM4-40GB MIG 3g.20gb"), 2: ("MIG-cccc", b"NVIDIA A100-SXM4-40GB MIG 1g.5gb")})]

def nvmlInit(): pass
def nvmlSystemGetDriverVersion(): return b"570.86.15"
def nvmlDeviceGetCount(): return len(GPUS)
def nvmlDeviceGetHandleByIndex(i): return ("gpu", i)
def nvmlDeviceGetUUID(h): return GPUS[h[1]][0] if h[0] == "gpu" else GPUS[h[1]][3][h[2]][0]
def nvmlDeviceGetName(h): return GPUS[h[1]][1] if h[0] == "gpu" else GPUS[h[1]][3][h[2]][1]
def nvmlDeviceGetMemoryInfo(h): return _Mem(GPUS[h[1]][2])
def nvmlDeviceGetMigMode(h):
    if GPUS[h[1]][3] is None:
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
    return (1, 1)
def nvmlDeviceGetMaxMigDeviceCount(h): return 7
def nvmlDeviceGetMigDeviceHandleByIndex(h, i):
    if i not in GPUS[h[1]][3]:
        raise RuntimeError("NVML_ERROR_NOT_FOUND")
    return ("mig", h[1], i)
'''


def test_without_nvidia_smi_nvml_lists_the_gpus_and_their_mig_instances(tmp_path, monkeypatch):
    """The NVML fallback (no nvidia-smi on PATH): whole GPUs with memory and driver, a GPU in MIG mode
    replaced by its instances."""
    (tmp_path / "pynvml.py").write_text(_Nvml.SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus = detect_gpus()
    assert [(g.id, g.name) for g in gpus] == [("GPU-1111", "NVIDIA H200"),
                                              ("MIG-aaaa", "NVIDIA A100-SXM4-40GB MIG 3g.20gb"),
                                              ("MIG-cccc", "NVIDIA A100-SXM4-40GB MIG 1g.5gb")]
    assert gpus[0].identity == "NVIDIA H200, 143771 MiB, driver 570.86.15"
    assert gpus[2].driver == "570.86.15"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,MIG-cccc")
    assert [g.name for g in detect_gpus()] == ["unidentified", "NVIDIA A100-SXM4-40GB MIG 1g.5gb"]


def test_nvidia_smi_and_nvml_give_one_gpu_the_same_identity(nvidia_smi, tmp_path, monkeypatch):
    """The same H200 seen through either source is one store key (memory in MiB as nvidia-smi rounds it)."""
    smi = next(g for g in detect_gpus() if g.id == "GPU-3333")
    (tmp_path / "pynvml.py").write_text(_Nvml.SOURCE.replace("150754820096", str(143771 << 20)).replace(
        "570.86.15", "550.54.15").replace("GPU-1111", "GPU-3333"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    nvml = next(g for g in detect_gpus() if g.id == "GPU-3333")
    assert nvml.identity == smi.identity


def _measurer(tmp_path, gpus):
    envs = EnvManager(tmp_path / "envs")
    return Measurer(Store(tmp_path / "s.db"), envs, EnvSpec(name="plain"), ScriptProbe(path=tmp_path / "probe.py"),
                    LocalExecutor(envs, GpuPool(gpus)))


def _base(provided):
    return SimpleNamespace(base=SimpleNamespace(provided=provided))


def test_the_store_key_tells_gpu_models_memory_drivers_and_cuda_runtimes_apart(tmp_path):
    (tmp_path / "probe.py").write_text("")
    cand = Candidate(package="accelerate", kind=CandidateKind.RELEASE, ref="0.22.0")
    h200 = Gpu(id="GPU-3333", name="NVIDIA H200", memory_mib=143771, driver="550.54.15")
    a100 = Gpu(id="GPU-3333", name="NVIDIA A100-SXM4-80GB", memory_mib=81920, driver="550.54.15")
    cu121 = _base({"torch": "2.1.0", "nvidia-cuda-runtime-cu12": "12.1.105"})

    def key(gpus, recipe=cu121):
        return _measurer(tmp_path, gpus).key(cand, "envfp", 0, recipe)

    assert key([h200]) == key([h200.model_copy(update={"id": "0"})])   # the same GPU model, wherever
    assert key([h200]) != key([a100])                                   # two GPU models, two keys
    assert key([h200]) != key([h200.model_copy(update={"memory_mib": 81559})])
    assert key([h200]) != key([h200.model_copy(update={"driver": "570.86.15"})])
    assert key([h200]) != key([h200], _base({"torch": "2.11.0+cu130"}))
    assert _measurer(tmp_path, [h200]).executor.kind == "cuda:NVIDIA H200, 143771 MiB, driver 550.54.15"
    # the CPU key is what it always was, so stores keep their CPU measurements
    raw = "\0".join(["accelerate", "release", "0.22.0", "envfp", _measurer(tmp_path, []).probe_fp, "0", "cpu"])
    assert key([]) == hashlib.sha256(raw.encode()).hexdigest()[:32]


def test_cuda_runtime_of_an_environment():
    assert cuda_runtime({"torch": "2.1.0", "nvidia-cuda-runtime-cu12": "12.1.105"}) == "12.1"
    assert cuda_runtime({"torch": "2.9.0", "nvidia-cuda-runtime": "13.0.96"}) == "13.0"
    assert cuda_runtime({"torch": "2.11.0+cu130"}) == "13.0" and cuda_runtime({"torch": "2.0.1+cu118"}) == "11.8"
    assert cuda_runtime({"torch": "2.4.0+rocm6.1"}) == "rocm 6.1"
    assert cuda_runtime({"torch": "2.13.0+cpu"}) == "none" and cuda_runtime({"torch": "2.13.0"}) == "unknown"


def test_the_report_shows_the_gpu_its_memory_driver_and_cuda():
    device = {"type": "cuda", "name": "NVIDIA H200", "total_bytes": 150754820096, "driver": "570.86.15",
              "cuda": "13.0"}
    facts = environment_facts(ProbeResult(device=device, meter="cuda"), None, "accelerate")
    assert (facts.gpu, facts.driver, facts.cuda) == ("NVIDIA H200, 140.4 GiB", "570.86.15", "13.0")
    assert Device(name="NVIDIA H200").gpu_label == "NVIDIA H200" and Device().gpu_label is None


def test_bisector_probe_says_which_gpu_measured(tmp_path):
    from bisector.cli.cmd_probe import _header
    from bisector.core.measurement import Measurement, Status

    device = {"type": "cuda", "name": "NVIDIA H200", "total_bytes": 150754820096, "driver": "570.86.15",
              "cuda": "13.0"}
    m = Measurement(key="k", package="accelerate", candidate="0.22.0", env_fingerprint="e", probe_fingerprint="p",
                    repeat=0, status=Status.OK, seconds=41.0, details={"result": {"device": device, "meter": "cuda"}})
    (tmp_path / "p.py").write_text("")
    lines = _header("accelerate", "0.22.0", m, False, ScriptProbe(path=tmp_path / "p.py"))
    assert lines[-1] == "  on NVIDIA H200, 140.4 GiB, driver 570.86.15, CUDA 13.0"
    cpu = m.model_copy(update={"result": ProbeResult.of({"device": {"type": "cpu"}, "meter": "cpu-dispatch"})})
    assert len(_header("accelerate", "0.22.0", cpu, False, ScriptProbe(path=tmp_path / "p.py"))) == 2
