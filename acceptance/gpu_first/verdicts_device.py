"""The checks of acceptance/gpu_first over the device itself, as pure functions (standard library only):
which GPU this is, that each CUDA measurement ran with the CUDA meter on a CUDA device (the probe,
the reference run, the allocator model, the command meter), and the command meter against the
script's own reading. ``(result, detail)`` as in verdicts.py, whose conventions hold here."""
from __future__ import annotations

from verdicts import TOLERANCE, cut, fail, incomplete, measured, ok, said

SMI_MEMORY_BELOW = 0.03   # torch's total_memory may be this share below nvidia-smi's memory.total, never above


def on_cuda(result, code=0) -> tuple:
    """The probe measured with the CUDA meter (``meter == "cuda"``) on a device of type ``cuda``."""
    if not result:
        return incomplete(f"no result: {said(code)}") if cut(code) else fail("no result")
    meter, device = result.get("meter"), (result.get("device") or {}).get("type")
    cells = {c.get("meter") for c in measured(result).values()}
    if meter != "cuda" or device != "cuda" or not cells <= {"cuda"}:
        return fail(f"meter {meter!r}, device.type {device!r}, the cells' meters {sorted(map(str, cells))}")
    return ok(f"meter cuda, device.type cuda ({(result.get('device') or {}).get('name')})")


def reference_on_cuda(reference, code=0) -> tuple:
    """reference.py ran on a CUDA device and read torch.cuda's counters in every cell it finished."""
    if not reference:
        return incomplete(f"no result: {said(code)}") if cut(code) else fail("no reference result")
    device, meters = reference.get("device") or {}, reference.get("meters") or {}
    if device.get("type") != "cuda" or not device.get("name") or not meters or set(meters.values()) != {"cuda"}:
        return fail(f"device {device}, the cells' meters {sorted(set(map(str, meters.values())))}")
    return ok(f"{len(meters)} cells read torch.cuda on {device['name']}")


def allocator_on_cuda(data) -> tuple:
    """allocator_model.py's CUDA half ran: every finished cell's model was on a CUDA device and its
    peaks are torch.cuda's counters (``meter == "cuda"``)."""
    if not data:
        return fail("no allocator_model.json")
    if data.get("cuda_skipped"):
        return fail(f"the CUDA half did not run: {data['cuda_skipped']}")
    cells = data.get("cells") or []
    bad = [f"h{c.get('hidden')} GA={c.get('ga')}: {(c.get('cuda') or {}).get('device_type')!r}, meter "
           f"{(c.get('cuda') or {}).get('meter')!r}" for c in cells
           if ((c.get("cuda") or {}).get("device_type"), (c.get("cuda") or {}).get("meter")) != ("cuda", "cuda")]
    if bad or not cells:
        return fail(f"{len(bad)} of {len(cells)} cells not measured on CUDA: {'; '.join(bad[:3])}")
    return ok(f"{len(cells)} cells on {data.get('device')}, meter cuda")


def _smi_row(query: str, uuid: str):
    """nvidia-smi's ``uuid, memory.total (MiB), driver`` row for ``uuid``, or None."""
    for line in (query or "").splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 3 and fields[0].replace("GPU-", "") == uuid.replace("GPU-", ""):
            return fields
    return None


def gpu_identity(facts: dict) -> tuple:
    """torch's device 0, NVML's device of that UUID and nvidia-smi's listing name the same GPU; torch
    sees exactly one; nvidia-smi's memory.total for that UUID is torch's total_memory (torch at most
    ``SMI_MEMORY_BELOW`` under it: what the driver keeps); and the probe's own facts (what results
    and the store key carry) name it, with nvidia-smi's driver."""
    torch_dev, probe = facts.get("torch_device") or {}, facts.get("probe_device") or {}
    gpu, uuid = torch_dev.get("name"), str(torch_dev.get("uuid") or "")
    if not gpu or not uuid:
        return fail(f"torch sees no CUDA device: {torch_dev}")
    listed = facts.get("nvidia_smi_L") or ""
    if uuid.replace("GPU-", "").replace("MIG-", "") not in listed or gpu.split(" MIG ")[0] not in listed:
        return fail(f"nvidia-smi -L does not list {gpu} {uuid}: {listed[:300]!r}")
    if facts.get("nvml_name") != gpu:
        return fail(f"NVML names the device with torch's UUID {facts.get('nvml_name')!r}, torch {gpu!r}")
    if torch_dev.get("count") != 1:
        return fail(f"torch sees {torch_dev.get('count')} CUDA devices, not exactly one "
                    f"(CUDA_VISIBLE_DEVICES {(torch_dev.get('allocator_env') or {}).get('CUDA_VISIBLE_DEVICES')!r})")
    row = _smi_row(facts.get("nvidia_smi_query") or "", uuid)
    if row is None:
        return fail(f"nvidia-smi --query-gpu has no row for {uuid}: {str(facts.get('nvidia_smi_query'))[:300]!r}")
    try:
        smi_bytes = float(row[1]) * (1 << 20)
    except ValueError:
        return fail(f"nvidia-smi's memory.total {row[1]!r} is not a number of MiB")
    total = torch_dev.get("total_bytes")
    if not isinstance(total, int) or not smi_bytes * (1 - SMI_MEMORY_BELOW) <= total <= smi_bytes + (1 << 20):
        return fail(f"torch's total_memory {total} B against nvidia-smi's {row[1]} MiB ({smi_bytes:.0f} B): "
                    f"more than {SMI_MEMORY_BELOW:.0%} below it, or above it")
    if not str(probe.get("nvml", "")).startswith("device ") or probe.get("name") != gpu or not probe.get("driver"):
        return fail(f"the probe's device facts: {probe}")
    if probe.get("driver") != row[2]:
        return fail(f"the probe's driver {probe.get('driver')!r}, nvidia-smi's {row[2]!r}")
    return ok(f"{gpu} ({uuid}), one visible, torch {total} B of nvidia-smi's {row[1]} MiB "
              f"({total / smi_bytes:.2%}), NVML {probe['nvml']}, driver {probe['driver']}, CUDA {probe.get('cuda')}")


# --- the command meter (step command) --------------------------------------------------------------
def command_ran(code, result, steps: int) -> tuple:
    """The meter ran the script to its end (exit 0) and saw all its ``steps`` optimizer steps."""
    if cut(code):
        return incomplete(said(code))
    seen = ((result or {}).get("metrics") or {}).get("optimizer_steps")
    if code != 0 or seen != steps:
        return fail(f"exit {code}, steps {seen}, error {(result or {}).get('error')}")
    return ok(f"{seen} steps")


def command_window(own, steps: int) -> tuple:
    """The script's own step-end hook ran before the meter's at every step: at step i the meter had
    recorded i steps, so the script read the counter over the meter's window, before its reset."""
    seen = (own or {}).get("meter_steps_seen")
    if seen != list(range(steps)):
        return fail(f"at the script's step ends the meter had recorded {seen} steps, expected "
                    f"{list(range(steps))}: the script did not read the meter's window")
    return ok(f"{steps} steps: the script read before the meter's reset each time")


def command_cpu_meter(result) -> tuple:
    """The dry run: the meter counted tensor bytes on the CPU (``cpu-dispatch``), a positive step peak."""
    meter, peak = (result or {}).get("meter"), ((result or {}).get("metrics") or {}).get("step_peak_bytes")
    if meter != "cpu-dispatch" or not isinstance(peak, int) or peak <= 0:
        return fail(f"meter {meter!r}, step_peak_bytes {peak!r}")
    return ok(f"{meter}, step_peak_bytes {peak}")


def command_on_cuda(result, own) -> tuple:
    """What ran, not what was asked: the meter's ``cuda`` meter on a ``cuda`` device that its steps
    name, every step with CUDA counters, and the script's own model on ``cuda``."""
    result, own = result or {}, own or {}
    device, steps = result.get("device") or {}, result.get("steps") or []
    problems = [f"meter {result.get('meter')!r}"] if result.get("meter") != "cuda" else []
    problems += [f"device.type {device.get('type')!r}"] if device.get("type") != "cuda" else []
    problems += ["the meter's steps name no GPU"] if not device.get("name") else []
    problems += [f"{sum('cuda_peak_allocated' not in s for s in steps)} of {len(steps)} steps without CUDA "
                 "counters"] if not steps or any("cuda_peak_allocated" not in s for s in steps) else []
    if (own.get("device"), own.get("param_device")) != ("cuda", "cuda"):
        problems.append(f"the script ran on {own.get('device')!r} (parameters on {own.get('param_device')!r})")
    return fail("; ".join(problems)) if problems else ok(f"meter cuda on {device['name']}, the script's model on cuda")


def command_vs_script(result, own) -> tuple:
    """Every step's ``cuda_peak_allocated`` and the result's ``step_peak_bytes`` (max over the measured
    steps) against the script's own ``max_memory_allocated`` read in the same window: within 1%."""
    peaks, steps = (own or {}).get("peaks") or [], (result or {}).get("steps") or []
    skip = (result or {}).get("measure_skip", 1)
    meter = [s.get("cuda_peak_allocated") for s in steps]
    if len(peaks) != len(meter) or len(peaks) <= skip or None in meter:
        return fail(f"the script read {len(peaks)} step peaks, the meter recorded {meter}: at least {skip + 1} "
                    f"steps of both needed (--measure-skip {skip})")
    off = [(i, m, p) for i, (m, p) in enumerate(zip(meter, peaks)) if abs(m - p) > TOLERANCE * p]
    ours, theirs = ((result or {}).get("metrics") or {}).get("step_peak_bytes"), max(peaks[skip:])
    if not isinstance(ours, (int, float)) or abs(ours - theirs) > TOLERANCE * theirs:
        off.append(("step_peak_bytes", ours, theirs))
    if off:
        return fail(f"(step, meter, script) more than 1% apart: {off}")
    exact = sum(m == p for m, p in zip(meter, peaks))
    return ok(f"step_peak_bytes {ours} B, the script's {theirs} B; {exact} of {len(peaks)} steps exactly equal")


def command_nvml(result) -> tuple:
    """NVML's used bytes of the GPU are at least the reserved peak (it counts the context on top)."""
    m = (result or {}).get("metrics") or {}
    used, reserved = m.get("nvml_used_peak_bytes"), m.get("cuda_reserved_peak_bytes")
    if used is None or reserved is None:
        return fail(f"nvml_used_peak_bytes {used}, cuda_reserved_peak_bytes {reserved}: "
                    f"{((result or {}).get('absent') or {}).get('nvml_used_peak_bytes')}")
    return (ok if used >= reserved else fail)(f"NVML used {used} B, reserved peak {reserved} B")
