"""The checks of bench/gpu_first as pure functions of what the steps found (standard library only).

Each returns ``(result, detail)``: ``PASS`` or ``FAIL`` (missing data is a FAIL, never a pass), and
each can fail: ``tests/process/test_gpu_first.py`` feeds every one a case that must.
"""
from __future__ import annotations

TOLERANCE = 0.01    # the meter against torch.cuda.max_memory_allocated: exact expected, 1% allowed
# What the seed report measured (NVML, GA=2 minus GA=1, bytes per parameter), bf16 mixed and fp32
SEED = {"pythia-1.4b": {"bf16": 0.86, "fp32": 0.29}, "llama-7b": {"bf16": 1.54, "fp32": 0.18}}
MIN_EXCESS = 1.0    # bf16 GA cost - fp32 GA cost, allocated peak, bytes per parameter
FP32_MARGIN = 0.2   # fp32 GA cost <= the embedding gradient's own B/param + this (allocated peak)
SMI_MEMORY_BELOW = 0.03   # torch's total_memory may be this share below nvidia-smi's memory.total, never above
COLUMNS = (("allocated", "peak_bytes"), ("reserved", "reserved_peak_bytes"),
           ("NVML used", "nvml_device_used_at_marks_max_bytes"))


def ok(detail) -> tuple:
    return "PASS", detail


def fail(detail) -> tuple:
    return "FAIL", detail


def name(cell: dict) -> str:
    return f"{cell['precision']}.ga{cell['ga']}.h{cell['hidden']}"


def measured(result) -> dict:
    """Cell name -> cell of every measured cell of a probe result ({} without one)."""
    return {name(c): c for c in (result or {}).get("cells", []) if "peak_bytes" in c and not c.get("error")}


def _errors(result) -> list:
    return [f"{name(c)}: {str(c['error'])[:160]}" for c in (result or {}).get("cells", []) if c.get("error")]


def all_measured(code, result) -> tuple:
    """The probe exited 0 and measured every cell."""
    if not result:
        return fail(f"no result (exit {code})")
    errors = _errors(result)
    if code != 0 or errors or not measured(result):
        return fail(f"exit {code}; {len(errors)} cell error(s): {'; '.join(errors[:3]) or result.get('error')}")
    return ok(f"{len(measured(result))} cells, meter {result.get('meter')}")


def meter_vs_reference(result, reference) -> tuple:
    """Every cell's allocated peak from the probe's meter against the independent run's."""
    ours, theirs = measured(result), {k: v for k, v in (reference or {}).get("cells", {}).items() if v}
    if not ours or set(ours) != set(theirs):
        return fail(f"cells measured: probe {sorted(ours)}, reference {sorted(theirs)}")
    off = {k: (ours[k]["peak_bytes"], theirs[k]) for k in ours
           if abs(ours[k]["peak_bytes"] - theirs[k]) > TOLERANCE * theirs[k]}
    exact = sum(ours[k]["peak_bytes"] == theirs[k] for k in ours)
    if off:
        return fail(f"{len(off)} of {len(ours)} cells differ by more than 1%: {off}")
    return ok(f"{len(ours)} cells within 1%, {exact} exactly equal")


def invariants(result) -> tuple:
    """Per cell: requested <= allocated <= reserved, and NVML's device-wide used >= reserved."""
    cells, broken = measured(result), []
    if not cells:
        return fail("no measured cell")
    for key, c in cells.items():
        req, alloc, res = c.get("requested_peak_bytes"), c.get("peak_bytes"), c.get("reserved_peak_bytes")
        nvml = c.get("nvml_device_used_at_marks_max_bytes")
        if None in (req, alloc, res) or not req <= alloc <= res:
            broken.append(f"{key}: requested {req}, allocated {alloc}, reserved {res}")
        if nvml is None or nvml < (res or 0):
            broken.append(f"{key}: NVML used {nvml} ({c.get('nvml_unavailable') or 'read'}) < reserved {res}")
    if broken:
        return fail("; ".join(broken[:4]))
    return ok(f"{len(cells)} cells: requested <= allocated <= reserved <= NVML used")


def same_peaks(a, b, what: str) -> tuple:
    """The cells both results measured have the same allocated peak (within 1%)."""
    one, two = measured(a), measured(b)
    common = sorted(set(one) & set(two))
    if not common:
        return fail(f"no cell measured in both ({what})")
    off = {k: (one[k]["peak_bytes"], two[k]["peak_bytes"]) for k in common
           if abs(one[k]["peak_bytes"] - two[k]["peak_bytes"]) > TOLERANCE * two[k]["peak_bytes"]}
    return fail(f"{what}: {off}") if off else ok(f"{what}: {len(common)} cells within 1%")


def _running_max(cell: dict) -> bool:
    peaks = [p["peak_bytes"] for p in (cell.get("phases") or {}).values()]
    return bool(peaks) and peaks == sorted(peaks) and peaks[-1] == cell["peak_bytes"]


def resets(phase, window) -> tuple:
    """``--cuda-reset`` reached the meter: each cell says the mode it ran in; in window mode every
    phase's peak is the running maximum, with per-phase resets some phase peaks below the step's;
    and both give the same step peak."""
    per, win = measured(phase), measured(window)
    if not per or set(per) != set(win):
        return fail(f"cells: phase mode {sorted(per)}, window mode {sorted(win)}")
    said = {c.get("cuda_reset") for c in per.values()}, {c.get("cuda_reset") for c in win.values()}
    if said != ({"phase"}, {"window"}):
        return fail(f"the cells' meters ran in {said[0]} and {said[1]}, asked phase and window")
    if not all(_running_max(c) for c in win.values()):
        return fail("in window mode a phase peak fell below an earlier one: the counters were reset per phase")
    if any(_running_max(c) for c in per.values()):
        return fail("with per-phase resets a cell's phase peaks are a running maximum: its resets did not happen")
    off = {k: (per[k]["peak_bytes"], win[k]["peak_bytes"]) for k in per if per[k]["peak_bytes"] != win[k]["peak_bytes"]}
    if off:
        return fail(f"step peaks differ between the modes: {off}")
    return ok(f"{len(per)} cells: meters ran as asked, window phases are running maxima, step peaks equal")


EXPECTED = {"fp32": ("off", "float32"), "bf16": ("bfloat16", "bfloat16"), "fp16": ("float16", "float16")}


def precision(code, result) -> tuple:
    """Every cell measured, and what its forward did (autocast, output dtype) is its precision."""
    verdict = all_measured(code, result)
    if verdict[0] != "PASS":
        return verdict
    wrong = [f"{k}: {c.get('precision_observed')}" for k, c in measured(result).items()
             if not c.get("precision_observed")
             or any((o["autocast"], o["output"]) != EXPECTED[c["precision"]] for o in c["precision_observed"])]
    if wrong:
        return fail("; ".join(wrong[:3]))
    skipped = {k: c.get("skipped_steps") for k, c in measured(result).items() if c.get("skipped_steps")}
    return ok(f"{len(measured(result))} cells proved {sorted({c['precision'] for c in measured(result).values()})}"
              f"{f'; fp16 warm-up steps skipped and repeated: {skipped}' if skipped else ''}")


def whole_oom(code, result) -> tuple:
    """A cap below any cell: nothing measured (exit 3), every cell in ``oom_cells``."""
    cells = (result or {}).get("cells", [])
    oom = (result or {}).get("oom_cells", [])
    if code != 3 or not cells or sorted(oom) != sorted(name(c) for c in cells):
        return fail(f"exit {code}, oom_cells {len(oom)} of {len(cells)} cells: {oom}")
    return ok(f"exit 3, all {len(cells)} cells out of memory")


def partial_cap(result):
    """(fraction of the GPU's memory, the cells expected out of memory) for a cap between the
    largest reserved peak of the smaller model's cells and the smallest of the larger model's, or
    (None, why not)."""
    cells = measured(result)
    total = ((result or {}).get("device") or {}).get("total_bytes")
    if not isinstance(total, (int, float)) or total <= 0:
        return None, f"the result has no device total_bytes ({total!r}): a cap cannot be made a fraction"
    widths = sorted({c["hidden"] for c in cells.values()})
    if len(widths) < 2 or any("reserved_peak_bytes" not in c for c in cells.values()):
        return None, f"need reserved peaks of two widths, have {widths}"
    small = max(c["reserved_peak_bytes"] for c in cells.values() if c["hidden"] < widths[-1])
    large = min(c["reserved_peak_bytes"] for c in cells.values() if c["hidden"] == widths[-1])
    if large <= small:
        return None, f"the widths' reserved peaks overlap ({small} >= {large})"
    expected = sorted(k for k, c in cells.items() if c["hidden"] == widths[-1])
    return (small + (large - small) / 2) / total, expected


def partial_oom(code, result, expected) -> tuple:
    """Under a cap between two widths: exactly the larger width's cells out of memory, the rest
    measured, the probe exits 0."""
    cells = (result or {}).get("cells", [])
    oom = sorted((result or {}).get("oom_cells", []))
    rest = sorted(name(c) for c in cells if name(c) not in expected)
    if code != 0 or oom != sorted(expected) or sorted(measured(result)) != rest:
        return fail(f"exit {code}, oom_cells {oom}, expected {sorted(expected)}; measured {sorted(measured(result))}")
    return ok(f"exit 0, {len(oom)} cells out of memory as expected, {len(rest)} measured")


def ga_costs(result) -> dict:
    """{precision: {column: GA=2 minus GA=1 bytes per parameter}} of a one-width seed-shape result."""
    cells = measured(result)
    out = {}
    for prec in ("bf16", "fp32"):
        one, two = cells.get(f"{prec}.ga1.h{_width(cells)}"), cells.get(f"{prec}.ga2.h{_width(cells)}")
        if not one or not two:
            continue
        out[prec] = {col: (two[key] - one[key]) / one["n_params"] for col, key in COLUMNS
                     if isinstance(one.get(key), (int, float)) and isinstance(two.get(key), (int, float))}
    return out


def _width(cells: dict):
    return next((c["hidden"] for c in cells.values()), None)


def embedding_bpp(result):
    """The fp32 gradient of the input embedding (vocab x hidden x 4 B) per parameter of the model,
    from the result's own config and cells, or None. With GA=2 that gradient is a temporary the
    second micro-step adds on top of the accumulated one: the floor of fp32's GA cost."""
    cells = measured(result)
    vocab = (((result or {}).get("probe") or {}).get("config") or {}).get("vocab")
    cell = next(iter(cells.values()), None)
    if not cell or not isinstance(vocab, int) or not cell.get("n_params"):
        return None
    return vocab * cell["hidden"] * 4 / cell["n_params"]


def fp32_bound(result):
    """(the fp32 GA cost bound, the embedding's B/param it comes from), or (None, None)."""
    floor = embedding_bpp(result)
    return (None, None) if floor is None else (floor + FP32_MARGIN, floor)


def seed_criteria(costs: dict, max_fp32) -> tuple:
    """bf16 GA cost - fp32 GA cost >= 1.0 B/param and fp32 GA cost <= ``max_fp32`` B/param
    (:func:`fp32_bound`: the embedding gradient's own B/param plus ``FP32_MARGIN``; allocated peak)."""
    try:
        bf16, fp32 = costs["bf16"]["allocated"], costs["fp32"]["allocated"]
    except KeyError:
        return fail(f"GA costs missing: {costs}")
    if not isinstance(max_fp32, (int, float)):
        return fail(f"no fp32 bound: the result says no vocabulary or parameter count ({max_fp32!r})")
    detail = (f"bf16 {bf16:.3f} - fp32 {fp32:.3f} = {bf16 - fp32:.3f} B/param (>= {MIN_EXCESS}), "
              f"fp32 {fp32:.3f} <= {max_fp32:.3f} (embedding + {FP32_MARGIN})")
    return ok(detail) if bf16 - fp32 >= MIN_EXCESS and fp32 <= max_fp32 else fail(detail)


def on_cuda(result) -> tuple:
    """The probe measured with the CUDA meter (``meter == "cuda"``) on a device of type ``cuda``."""
    if not result:
        return fail("no result")
    meter, device = result.get("meter"), (result.get("device") or {}).get("type")
    cells = {c.get("meter") for c in measured(result).values()}
    if meter != "cuda" or device != "cuda" or not cells <= {"cuda"}:
        return fail(f"meter {meter!r}, device.type {device!r}, the cells' meters {sorted(map(str, cells))}")
    return ok(f"meter cuda, device.type cuda ({(result.get('device') or {}).get('name')})")


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


# Every bound a check holds, the condition it fails on and why it sits where it does (check.md's
# "Bounds" section and docs/gpu.md's table; the allocator step adds its own from allocator_model.py).
BOUNDS = [
    ("meter: the probe's peaks vs torch.cuda.max_memory_allocated (accelerate and Trainer pairs)",
     f"any cell off by more than {TOLERANCE:.0%}",
     "both read the same allocator counter over the same window: equal expected; 1% is slack for "
     "allocations that are not the model's (a library workspace on first use); a meter that reads another "
     "window, or loses the step's peak to a reset, misses whole tensors"),
    ("invariants: isolated vs one-process peaks; resets: window vs phase step peak",
     f"more than {TOLERANCE:.0%} apart / not equal",
     "the same cells on a fresh allocator: allocated bytes are the program's, not the allocator's"),
    ("facts: torch's total_memory vs nvidia-smi's memory.total",
     f"torch more than {SMI_MEMORY_BELOW:.0%} below, or above at all (1 MiB rounding)",
     "the driver keeps a little of the board for itself (well under 3% on the cards we know of; this "
     "run's detail gives the share); another GPU model or a MIG slice is 40% or more off"),
    ("seed: bf16 GA cost - fp32 GA cost (allocated)", f"below {MIN_EXCESS} B/param",
     "the CPU finds bf16's GA=2 keeping the 16-bit weight copies (2 B/param) beside the accumulated "
     "fp32 gradients: 1.564 B/param for pythia-1.4b; 1.0 is half the copies. Below it the GPU does "
     "not show what the CPU does: a finding to report, not a fault of the run"),
    ("seed: fp32 GA cost (allocated)", f"above the embedding gradient's own B/param + {FP32_MARGIN}",
     "GA=2's second micro-step adds the fp32 embedding gradient (vocab x hidden x 4 B) as a temporary: "
     "0.291 B/param for pythia-1.4b, 0.078 for llama-7b (the CPU measured 0.294 for pythia); the "
     f"margin {FP32_MARGIN} is a tenth of the smallest fault it catches, a 16-bit copy of every "
     "parameter kept alive (2 B/param)"),
]
