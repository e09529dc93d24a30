"""The checks of acceptance/gpu_first over probe results, as pure functions (standard library only).

Each returns ``(result, detail)``: ``PASS`` or ``FAIL`` (missing data is a FAIL, never a pass), and
each can fail: ``tests/process/test_gpu_first.py`` feeds every one a case that must. Running out of
time is never a fault: a command cut by the step's deadline or the budget (``INNER_TIMEOUT``,
``NOT_STARTED``) makes its checks ``INCOMPLETE`` (what finished is still judged: a finished cell that
is wrong FAILs), and a check that reads another step's result that is partial, absent or empty is ``SKIP``
with the reason (that step's own checks say why). ``FINDING`` is a number reported, never a fault.
The checks of the device itself (identity, the CUDA meter, the command meter) are in verdicts_device.py.
"""
from __future__ import annotations

TOLERANCE = 0.01    # the meter against torch.cuda.max_memory_allocated: exact expected, 1% allowed
# What the seed report measured (NVML, GA=2 minus GA=1, bytes per parameter), bf16 mixed and fp32
SEED = {"pythia-1.4b": {"bf16": 0.86, "fp32": 0.29}, "llama-7b": {"bf16": 1.54, "fp32": 0.18}}
MIN_EXCESS = 1.0    # bf16 GA cost - fp32 GA cost the CPU finds (1.564 for pythia): a finding, not a bound
FP32_MARGIN = 0.2   # fp32 GA cost <= the embedding gradient's own B/param + this (allocated peak)
COLUMNS = (("allocated", "peak_bytes"), ("reserved", "reserved_peak_bytes"),
           ("NVML used", "nvml_device_used_at_marks_max_bytes"))
INNER_TIMEOUT = -1000   # gf.run's exit code for a command it ended at its timeout or the step's deadline
NOT_STARTED = -1001     # gf.run's exit code when the step's deadline left no time to start the command


def ok(detail) -> tuple:
    return "PASS", detail


def fail(detail) -> tuple:
    return "FAIL", detail


def incomplete(detail) -> tuple:
    return "INCOMPLETE", detail


def skip(detail) -> tuple:
    return "SKIP", detail


def cut(code) -> bool:
    """The command ran out of time (the step's deadline, the budget): not a fault of what it measures."""
    return code in (INNER_TIMEOUT, NOT_STARTED)


def said(code) -> str:
    return {INNER_TIMEOUT: "killed at its timeout (the step's deadline)",
            NOT_STARTED: "not started: the step's deadline had passed"}.get(code, f"exit {code}")


def name(cell: dict) -> str:
    return f"{cell.get('precision')}.ga{cell.get('ga')}.h{cell.get('hidden')}"


def measured(result) -> dict:
    """Cell name -> cell of every measured cell of a probe result ({} without one)."""
    return {name(c): c for c in (result or {}).get("cells", []) if "peak_bytes" in c and not c.get("error")}


def unfinished(result):
    """Why ``result`` is not a finished result: ``absent``, or partial (k of n cells), else None."""
    if not result:
        return "absent"
    part = result.get("partial")
    return f"partial ({part.get('done')} of {part.get('planned')} cells)" if isinstance(part, dict) else None


def gap(other):
    """Why another step's probe result cannot be compared with: absent, partial, or without a measured
    cell (that step's own checks say why), else None."""
    why = unfinished(other)
    if why or measured(other):
        return why
    return f"without a measured cell ({str(other.get('error') or 'no cells')[:160]})"


def _errors(result) -> list:
    return [f"{name(c)}: {str(c['error'])[:160]}" for c in (result or {}).get("cells", []) if c.get("error")]


def all_measured(code, result) -> tuple:
    """The probe exited 0 and measured every cell; cut: INCOMPLETE, its finished cells kept."""
    errors = _errors(result)
    if cut(code):
        if errors:
            return fail(f"{said(code)}, and finished cells failed: {'; '.join(errors[:3])}")
        return incomplete(f"{said(code)}: {len(measured(result))} cells finished and kept "
                          f"({unfinished(result) or 'no result'})")
    if not result:
        return fail(f"no result (exit {code})")
    if code != 0 or errors or not measured(result):
        return fail(f"exit {code}; {len(errors)} cell error(s): {'; '.join(errors[:3]) or result.get('error')}")
    return ok(f"{len(measured(result))} cells, meter {result.get('meter')}")


def _off(one: dict, two: dict, keys) -> dict:
    return {k: (one[k], two[k]) for k in keys if abs(one[k] - two[k]) > TOLERANCE * two[k]}


def meter_vs_reference(result, reference, code=0, ref_code=0) -> tuple:
    """Every cell's allocated peak from the probe's meter against the independent run's."""
    ours = {k: c["peak_bytes"] for k, c in measured(result).items()}
    theirs = {k: v for k, v in ((reference or {}).get("cells") or {}).items() if isinstance(v, (int, float)) and v}
    common = sorted(set(ours) & set(theirs))
    off = _off(ours, theirs, common)
    if off:
        return fail(f"{len(off)} of {len(common)} cells differ by more than 1%: {off}")
    short = [f"the probe: {said(code)}"] if cut(code) else []
    if cut(ref_code):
        short.append(f"the reference run: {said(ref_code)}")
    if short:
        return incomplete(f"{len(common)} cells compared, within 1%; not all ran: {'; '.join(short)}")
    if not ours or set(ours) != set(theirs):
        return fail(f"cells measured: probe {sorted(ours)}, reference {sorted(theirs)}")
    exact = sum(ours[k] == theirs[k] for k in common)
    return ok(f"{len(common)} cells within 1%, {exact} exactly equal")


def invariants(result, code=0) -> tuple:
    """Per cell: requested <= allocated <= reserved, and NVML's device-wide used >= reserved."""
    cells, broken = measured(result), []
    for key, c in cells.items():
        req, alloc, res = c.get("requested_peak_bytes"), c.get("peak_bytes"), c.get("reserved_peak_bytes")
        nvml = c.get("nvml_device_used_at_marks_max_bytes")
        if None in (req, alloc, res) or not req <= alloc <= res:
            broken.append(f"{key}: requested {req}, allocated {alloc}, reserved {res}")
        if nvml is None or nvml < (res or 0):
            broken.append(f"{key}: NVML used {nvml} ({c.get('nvml_unavailable') or 'read'}) < reserved {res}")
    if broken:
        return fail("; ".join(broken[:4]))
    if cut(code):
        return incomplete(f"{said(code)}: the {len(cells)} finished cells hold them")
    if not cells:
        return fail("no measured cell")
    return ok(f"{len(cells)} cells: requested <= allocated <= reserved <= NVML used")


def same_peaks(own, other, what: str, code=0) -> tuple:
    """The cells both results measured have the same allocated peak (within 1%). ``own`` is this
    step's result (``code`` its probe's exit), ``other`` an earlier step's."""
    one, two = measured(own), measured(other)
    common = sorted(set(one) & set(two))
    off = _off({k: one[k]["peak_bytes"] for k in common}, {k: two[k]["peak_bytes"] for k in common}, common)
    if off:
        return fail(f"{what}: {off}")
    if cut(code):
        return incomplete(f"{what}: this step's probe was {said(code)}; {len(common)} cells within 1%")
    missing, why = sorted(set(one) - set(two)), gap(other)
    if why and (missing or not common):
        return skip(f"{what}: the other step's result is {why}: {len(common)} cells compared (within 1%), "
                    f"{len(missing)} not in it")
    if not common:
        return fail(f"no cell measured in both ({what})")
    return ok(f"{what}: {len(common)} cells within 1%")


def _running_max(cell: dict) -> bool:
    peaks = [p.get("peak_bytes") for p in (cell.get("phases") or {}).values()]
    return bool(peaks) and None not in peaks and peaks == sorted(peaks) and peaks[-1] == cell["peak_bytes"]


def resets(phase, window, code=0) -> tuple:
    """``--cuda-reset`` reached the meter: each cell says the mode it ran in; in window mode every
    phase's peak is the running maximum, with per-phase resets some phase peaks below the step's;
    and both give the same step peak. ``phase`` is the meter step's result, ``window`` this step's."""
    per, win = measured(phase), measured(window)
    common = sorted(set(per) & set(win))
    said_modes = {per[k].get("cuda_reset") for k in common}, {win[k].get("cuda_reset") for k in common}
    if common and said_modes != ({"phase"}, {"window"}):
        return fail(f"the cells' meters ran in {said_modes[0]} and {said_modes[1]}, asked phase and window")
    if not all(_running_max(win[k]) for k in common):
        return fail("in window mode a phase peak fell below an earlier one: the counters were reset per phase")
    if any(_running_max(per[k]) for k in common):
        return fail("with per-phase resets a cell's phase peaks are a running maximum: its resets did not happen")
    off = {k: (per[k]["peak_bytes"], win[k]["peak_bytes"]) for k in common
           if per[k]["peak_bytes"] != win[k]["peak_bytes"]}
    if off:
        return fail(f"step peaks differ between the modes: {off}")
    if cut(code):
        return incomplete(f"the window run was {said(code)}; {len(common)} cells agree")
    why = gap(phase)
    if why and (set(win) - set(per) or not common):
        return skip(f"the meter step's result is {why}: {len(common)} cells compared, {len(set(win) - set(per))} not")
    if not per or set(per) != set(win):
        return fail(f"cells: phase mode {sorted(per)}, window mode {sorted(win)}")
    return ok(f"{len(per)} cells: meters ran as asked, window phases are running maxima, step peaks equal")


EXPECTED = {"fp32": ("off", "float32"), "bf16": ("bfloat16", "bfloat16"), "fp16": ("float16", "float16")}


def precision(code, result) -> tuple:
    """Every cell measured, and what its forward did (autocast, output dtype) is its precision."""
    cells = measured(result)
    wrong = [f"{k}: {c.get('precision_observed')}" for k, c in cells.items()
             if not c.get("precision_observed")
             or any((o.get("autocast"), o.get("output")) != EXPECTED.get(c["precision"])
                    for o in c["precision_observed"])]
    if wrong:
        return fail("; ".join(wrong[:3]))
    verdict = all_measured(code, result)
    if verdict[0] != "PASS":
        return verdict
    skipped = {k: c.get("skipped_steps") for k, c in cells.items() if c.get("skipped_steps")}
    return ok(f"{len(cells)} cells proved {sorted({c['precision'] for c in cells.values()})}"
              f"{f'; fp16 warm-up steps skipped and repeated: {skipped}' if skipped else ''}")


def whole_oom(code, result) -> tuple:
    """A cap below any cell: nothing measured (exit 3), every cell in ``oom_cells``."""
    if cut(code):
        return incomplete(said(code))
    cells = (result or {}).get("cells", [])
    oom = (result or {}).get("oom_cells", [])
    if code != 3 or not cells or sorted(oom) != sorted(name(c) for c in cells):
        return fail(f"exit {code}, oom_cells {len(oom)} of {len(cells)} cells: {oom}")
    return ok(f"exit 3, all {len(cells)} cells out of memory")


def partial_cap(result):
    """(fraction of the GPU's memory, the cells expected out of memory, the gap's facts) for a cap
    halfway between the largest reserved peak of the smaller model's cells and the smallest of the
    larger model's, or (None, why not, None)."""
    cells = measured(result)
    total = ((result or {}).get("device") or {}).get("total_bytes")
    if not isinstance(total, (int, float)) or total <= 0:
        return None, f"the result has no device total_bytes ({total!r}): a cap cannot be made a fraction", None
    widths = sorted({c["hidden"] for c in cells.values()})
    if len(widths) < 2 or any(not isinstance(c.get("reserved_peak_bytes"), (int, float)) for c in cells.values()):
        return None, f"need reserved peaks of two widths, have {widths}", None
    small = max(c["reserved_peak_bytes"] for c in cells.values() if c["hidden"] < widths[-1])
    large = min(c["reserved_peak_bytes"] for c in cells.values() if c["hidden"] == widths[-1])
    if large <= small:
        return None, f"the widths' reserved peaks overlap ({small} >= {large})", None
    expected = sorted(k for k, c in cells.items() if c["hidden"] == widths[-1])
    gap = {"smaller_width_max_reserved": small, "larger_width_min_reserved": large, "margin_each_side": (large - small) / 2}
    return (small + (large - small) / 2) / total, expected, gap


def partial_oom(code, result, expected) -> tuple:
    """Under a cap between two widths: exactly the larger width's cells out of memory, the rest
    measured, the probe exits 0. Cut: what finished must agree, and the check is INCOMPLETE."""
    cells = (result or {}).get("cells", [])
    oom = sorted((result or {}).get("oom_cells", []))
    rest = sorted(name(c) for c in cells if name(c) not in expected)
    if cut(code):
        wrong = sorted(set(measured(result)) & set(expected)) + sorted(set(oom) - set(expected))
        return fail(f"{said(code)}; finished cells on the wrong side of the cap: {wrong}") if wrong else \
            incomplete(f"{said(code)}: {len(cells)} finished cells on their side of the cap")
    if code != 0 or oom != sorted(expected) or sorted(measured(result)) != rest:
        return fail(f"exit {code}, oom_cells {oom}, expected {sorted(expected)}; measured {sorted(measured(result))}")
    return ok(f"exit 0, {len(oom)} cells out of memory as expected, {len(rest)} measured")


def ga_costs(result) -> dict:
    """{precision: {column: GA=2 minus GA=1 bytes per parameter}} of a one-width seed-shape result."""
    cells = measured(result)
    out = {}
    for prec in ("bf16", "fp32"):
        one, two = cells.get(f"{prec}.ga1.h{_width(cells)}"), cells.get(f"{prec}.ga2.h{_width(cells)}")
        if not one or not two or not one.get("n_params"):
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


def seed_fp32(costs: dict, max_fp32) -> tuple:
    """fp32 GA cost <= ``max_fp32`` B/param (:func:`fp32_bound`: the embedding gradient's own
    B/param plus ``FP32_MARGIN``; allocated peak)."""
    fp32 = (costs.get("fp32") or {}).get("allocated")
    if not isinstance(fp32, (int, float)):
        return fail(f"no fp32 GA cost: {costs}")
    if not isinstance(max_fp32, (int, float)):
        return fail(f"no fp32 bound: the result says no vocabulary or parameter count ({max_fp32!r})")
    detail = f"fp32 {fp32:.3f} <= {max_fp32:.3f} B/param (embedding {max_fp32 - FP32_MARGIN:.3f} + {FP32_MARGIN})"
    return ok(detail) if fp32 <= max_fp32 else fail(detail)


def seed_bf16_excess(costs: dict) -> tuple:
    """A FINDING, never a fault: bf16's GA cost over fp32's, against the CPU's (>= ``MIN_EXCESS``)."""
    bf16, fp32 = (costs.get("bf16") or {}).get("allocated"), (costs.get("fp32") or {}).get("allocated")
    if not isinstance(bf16, (int, float)) or not isinstance(fp32, (int, float)):
        return "FINDING", f"no GA costs to compare: {costs}"
    diff = bf16 - fp32
    where = "as on the CPU" if diff >= MIN_EXCESS else "below what the CPU finds: the GPU does not keep the copies"
    return "FINDING", f"bf16 {bf16:.3f} - fp32 {fp32:.3f} = {diff:.3f} B/param ({where}: >= {MIN_EXCESS} there)"
