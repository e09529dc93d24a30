"""What the speed probe ran on: threads, CPU model and count, and on CUDA the GPU with its clocks
(NVML through ``pynvml`` when importable, else ``nvidia-smi``; absent where neither is visible)."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess

import torch

SMI_FIELDS = ("clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem", "temperature.gpu", "power.draw",
              "clocks_throttle_reasons.active")


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo, else the platform's word for it)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvml_clocks(index: int) -> dict:
    import pynvml  # optional (nvidia-ml-py)

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        clocks = {"source": "nvml"}
        for name, kind in (("sm_mhz", pynvml.NVML_CLOCK_SM), ("mem_mhz", pynvml.NVML_CLOCK_MEM)):
            clocks[name] = pynvml.nvmlDeviceGetClockInfo(handle, kind)
            clocks["max_" + name] = pynvml.nvmlDeviceGetMaxClockInfo(handle, kind)
        clocks["throttle_reasons"] = int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
        return clocks
    finally:
        pynvml.nvmlShutdown()


def _smi_clocks(index: int) -> dict:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"source": None, "unavailable": "neither pynvml nor nvidia-smi is present"}
    out = subprocess.run([smi, f"--id={index}", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=20)
    if out.returncode != 0:
        return {"source": "nvidia-smi", "unavailable": (out.stderr or out.stdout).strip()[-200:]}
    values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    return {"source": "nvidia-smi", **dict(zip(SMI_FIELDS, values))}


def gpu_clocks(index: int = 0) -> dict:
    """The clocks of the GPU torch calls ``index`` (NVML, else nvidia-smi); NVML counts physical
    devices, so under ``CUDA_VISIBLE_DEVICES`` the first visible one is asked for by that id."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[index].strip() if os.environ.get(
        "CUDA_VISIBLE_DEVICES") else str(index)
    physical = int(visible) if visible.isdigit() else index
    try:
        return _nvml_clocks(physical)
    except Exception:  # pynvml missing or NVML not usable here: ask nvidia-smi
        try:
            return _smi_clocks(physical)
        except (OSError, subprocess.SubprocessError) as exc:
            return {"source": None, "unavailable": str(exc)}


def describe(device: torch.device) -> dict:
    """The result's ``device``: type, threads, CPU, and the GPU with its clocks on CUDA."""
    facts = {"type": device.type, "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
             "cpu": cpu_model(), "cpu_count": os.cpu_count(),
             "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}
    if device.type == "cuda":
        index = device.index or 0
        facts.update(name=torch.cuda.get_device_name(index), capability=".".join(map(str, torch.cuda.get_device_capability(index))),
                     cuda=torch.version.cuda, clocks=gpu_clocks(index))
    else:
        facts["name"] = facts["cpu"]
    return facts
