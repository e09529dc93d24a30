"""One line that says why a cell was not measured (or not measured whole): the resolver conflict
named by package, the import that failed, the crash, the OOM with the widths that ran out, the
timeout, the precision that could not be proved. The full text stays in the stored measurement."""
from __future__ import annotations

import re
from typing import Optional

from bisector.core.measurement import Measurement, Status, absent_reason
from bisector.redact import redact_text

LIMIT = 240
_SPLIT = re.compile(r"\s*\|\s*|\n")
_BECAUSE = re.compile(r"Because (.+?)(?:,? we can conclude| and (?:you|your requirements?) require|$)", re.I)
_ERROR = re.compile(r"\b((?:[A-Z]\w*)?(?:Error|Exception)): (.+)")
_WIDTH = re.compile(r"\.h(\d+)(?:\.|$)")


def _short(text: str) -> str:
    text = " ".join(redact_text(text).split())
    return text if len(text) <= LIMIT else text[:LIMIT - 1].rstrip() + "…"


def _parts(reason: str) -> list[str]:
    return [p.strip() for p in _SPLIT.split(reason or "") if p.strip()]


def _resolver(reason: str) -> Optional[str]:
    if not re.search(r"No solution found|ResolutionImpossible|conflicting dependencies|unsatisfiable", reason):
        return None
    found = _BECAUSE.search(" ".join(_parts(reason)))
    if found:
        return "resolver conflict: " + found[1].strip().rstrip(",.")
    caused = re.search(r"The conflict is caused by:(.+?)(?:To fix this|$)", " ".join(_parts(reason)))
    return "resolver conflict: " + (caused[1].strip() if caused else _parts(reason)[-1])


def _error_line(reason: str) -> Optional[str]:
    """The last 'SomethingError: message' in a traceback-like text."""
    hits = [m for part in _parts(reason) for m in [_ERROR.search(part)] if m]
    return f"{hits[-1][1]}: {hits[-1][2]}" if hits else None


def widths(cells: list[str]) -> list[str]:
    """'h256' for each width among probe cell names such as 'bf16.ga2.h256' (sorted by size)."""
    found = {int(m[1]) for c in cells for m in [_WIDTH.search(c)] if m}
    return [f"h{w}" for w in sorted(found)]


def oom_line(cells: list[str]) -> str:
    """'out of memory at width h256 (bf16.ga2.h256)': a partial OOM, the widths first."""
    ws = widths(cells)
    where = f"at width{'s' if len(ws) > 1 else ''} {', '.join(ws)} " if ws else ""
    return _short(f"out of memory {where}({', '.join(cells)})")


def failure_line(m: Measurement) -> str:
    """Why ``m`` gave no measurement, in one line."""
    reason = m.reason or ""
    if m.status is Status.ENV_FAILED:
        said = _resolver(reason)
        if said is None and "health check" in reason:
            error = _error_line(reason)
            said = f"import failed in the environment: {error}" if error else None
        return _short(said or f"environment: {_parts(reason)[0] if _parts(reason) else 'failed'}")
    if m.status is Status.OOM:
        error = _error_line(reason)
        return _short(f"out of memory: {error or reason.removeprefix('out of memory: ')}")
    if m.status is Status.TIMEOUT:
        return _short(reason or "timed out")
    precision = re.search(r"precision not proved: (.+)", reason)
    if precision:
        return _short(f"precision not proved: {precision[1]}")
    if m.status is Status.IMPORT_FAILED:
        return _short(f"import failed: {reason}")
    if m.status is Status.CRASHED:
        error = _error_line(reason)
        return _short(f"crash: {error}" if error else f"crash: {reason or 'no message'}")
    return _short(f"{m.status.value}: {reason}" if reason else m.status.value)


def missing_metric_line(m: Measurement, metric: str) -> str:
    """Why a probe that ran gave no ``metric``: the probe's failed cells, else its own reason (the command
    meter's ``absent``), else 'missing'."""
    cells = m.result.cells if m.result else []
    failed = [c for c in cells if isinstance(c, dict) and c.get("error")]
    if not failed:
        why = absent_reason([m], metric)
        return _short(f"metric {metric} missing from the probe's result" + (f": {why}" if why else ""))
    first = str(failed[0]["error"])
    c = failed[0]
    name = f"{c.get('precision', '?')}.ga{c.get('ga', '?')}.h{c.get('hidden', '?')}"
    return _short(f"metric {metric} missing: {len(failed)} probe cell{'s' if len(failed) > 1 else ''} failed "
                  f"(first {name}: {first})")
