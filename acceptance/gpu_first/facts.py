"""Step facts (planned 20 s on a GPU: a cold first import of torch is most of it): what the run is on.
nvidia-smi's listing, memory and driver
(the raw text, which the host's GPU detection parses in tests/process/test_gpu_first.py), the ML stack's
versions, torch's view of device 0, the allocator's settings, NVML's name for the same UUID, and the
probe's own device facts (what a measurement's result and the store key say)."""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(os.path.dirname(HERE)), "probes", "ga_memory"),
                os.path.join(os.path.dirname(os.path.dirname(HERE)), "probes")]

import gf  # noqa: E402
import verdicts  # noqa: E402
import verdicts_device  # noqa: E402

SMI = {"nvidia_smi_L": ["-L"], "nvidia_smi_query": ["--query-gpu=uuid,memory.total,driver_version",
                                                    "--format=csv,noheader,nounits"], "nvidia_smi": []}
ALLOC_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
             "CUBLAS_WORKSPACE_CONFIG")
# inner timeouts, s, in the order they run (with the runner's reserve they fit the cap in run.sh)
TIMEOUTS = {"nvidia_smi_L": 20, "nvidia_smi_query": 20, "nvidia_smi": 20}


def _smi(step):
    for key, args in SMI.items():
        if not shutil.which("nvidia-smi"):
            step.fact(key, None)
            continue
        timeout = min(TIMEOUTS[key], max(1.0, gf.step_left() or TIMEOUTS[key]))
        try:
            proc = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            step.fact(key, f"nvidia-smi {' '.join(args)} timed out after {timeout:.0f} s")
            continue
        step.fact(key, proc.stdout if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr[-300:]}")


def _versions(step):
    versions = {}
    for module in ("torch", "accelerate", "transformers", "pynvml"):
        try:
            versions[module] = getattr(__import__(module), "__version__", "present")
        except Exception as exc:  # noqa: BLE001 - recorded, and the check says so
            versions[module] = f"missing: {type(exc).__name__}: {exc}"
    versions["python"] = sys.version.split()[0]
    step.fact("versions", versions)
    return versions


def _torch_device(step):
    import torch

    info = {"cuda_build": torch.version.cuda, "available": torch.cuda.is_available()}
    if info["available"]:
        props = torch.cuda.get_device_properties(0)
        info.update(name=props.name, uuid=str(getattr(props, "uuid", "")), total_bytes=int(props.total_memory),
                    capability=f"{props.major}.{props.minor}", count=torch.cuda.device_count())
        backend = getattr(torch.cuda, "get_allocator_backend", None)
        info["allocator_backend"] = backend() if backend else None
    info["allocator_env"] = {k: os.environ[k] for k in ALLOC_ENV if k in os.environ}
    step.fact("torch_device", info)
    return info


def _nvml_name(step, uuid):
    try:
        import pynvml
        from _meters.cuda import uuid_candidates

        pynvml.nvmlInit()
        for spelling in uuid_candidates(uuid):
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(spelling)
            except Exception:  # noqa: BLE001 - the next spelling
                continue
            value = pynvml.nvmlDeviceGetName(handle)
            step.fact("nvml_name", value.decode() if isinstance(value, bytes) else str(value))
            return
        step.fact("nvml_name", f"no NVML device with UUID {uuid}")
    except Exception as exc:  # noqa: BLE001 - recorded
        step.fact("nvml_name", f"NVML unavailable: {type(exc).__name__}: {exc}")


def main():
    step = gf.Step("facts")
    _smi(step)
    versions = _versions(step)
    missing = {k: v for k, v in versions.items() if str(v).startswith("missing") and k != "pynvml"}
    step.check("facts.stack", verdicts.fail(missing) if missing else verdicts.ok(versions))
    device = _torch_device(step)
    if step.cuda and device["available"]:
        _nvml_name(step, device["uuid"])
    from _result import device_info

    step.fact("probe_device", device_info(step.dev))
    step.cuda_only("facts.identity", lambda: verdicts_device.gpu_identity(step.data["facts"]))
    return step.done()


if __name__ == "__main__":
    sys.exit(main())
