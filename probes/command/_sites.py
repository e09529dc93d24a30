"""The allocation sites at the command's step peak, from the meter's step records (standard library only).

A step record carries ``sites`` (the rows of the bytes live at its peak: ``_meters.site_bytes``) only where
they differ from the last step's that did; a step without them has those rows.
"""


def filled(steps):
    """Each step's rows (None before the first step that had any)."""
    last, out = None, []
    for step in steps:
        if isinstance(step.get("sites"), list):
            last = step["sites"]
        out.append(last)
    return out


def peak_sites(procs, facts, metrics, skip):
    """Where the bytes of ``step_peak_bytes`` were at that peak: ``{"rank", "pid", "step", "peak_bytes", "rows"}``
    for the first measured step, of the first rank, whose peak is the metric's value; each row ``{"site",
    "bytes", "storages", "largest"}`` (largest: the dtype and shape of the largest storage born there), the rows
    summing to the peak. None where the meter placed nothing (CUDA, ``--meter rss``, no measured step)."""
    value = metrics.get("step_peak_bytes")
    if value is None:
        return None
    for entry in facts.get("ranks", []):
        if entry["metrics"].get("step_peak_bytes") != value:
            continue
        steps = procs[entry["pid"]]["steps"]
        rows = filled(steps)
        for i in range(skip, len(steps)):
            if steps[i].get("peak_bytes") == value and rows[i] is not None:
                return {"rank": entry["rank"], "pid": entry["pid"], "step": steps[i].get("i", i), "peak_bytes": value,
                        "rows": [_row(r) for r in rows[i] if isinstance(r, list) and len(r) == 4]}
    return None


def _row(row):
    site, nbytes, storages, largest = row
    out = {"site": str(site), "bytes": nbytes}
    if storages is not None:
        out["storages"] = storages
    if largest:
        out["largest"] = str(largest)
    return out
