"""The environments at the boundary (last good, first bad): facts for the report, and the
companion packages that moved with the candidate (a possible other cause of the step)."""
from __future__ import annotations

import platform
from pathlib import Path
from typing import Iterable

from packaging.utils import canonicalize_name

from .envs.info import read_info
from .phase import PhaseResult
from .report import STACK, environment_facts, merge_sides

Side = tuple[dict, dict]   # (the probe's result details, the environment's name -> version)


def boundary_sides(phase: PhaseResult, fallback_details: dict) -> list[Side]:
    """Last good and first bad (or the first measured candidate when there is no boundary)."""
    s = phase.search
    indices = [i for i in (s.last_good, s.first_bad) if i in phase.judgements] or list(phase.judgements)[:1]
    sides = []
    for index in indices:
        ms = phase.judgements[index].measurements
        ok = [m for m in ms if m.status == "ok" and m.details.get("result")]
        details = ok[-1].details["result"] if ok else fallback_details
        paths = [m.details.get("env_path") for m in ms if m.details.get("env_path")]
        info = next((i for p in paths for i in [read_info(Path(p))] if i is not None), None)
        env = {"python": info.python_version, **dict(r.split("==", 1) for r in info.resolved if "==" in r),
               **info.provided} if info else {}
        sides.append((details, env))
    return sides


def environment_section(sides: list[Side], package: str, spec_name: str, spec_base: str) -> dict:
    """OS, Python, torch, CUDA, GPU, driver, meter and the ML stack: from the probe's result where it
    reports them, else from the environment's info file; shown once when both sides agree, side by
    side where they differ."""
    facts = [environment_facts(details, env, package) for details, env in sides]
    merged = merge_sides(*facts) if len(facts) == 2 else (facts[0] if facts else {})
    return {"os": platform.platform(), **merged, "env spec": spec_name, "env base": spec_base}


def also_changed(phase: PhaseResult, sides: list[Side], package: str, companions: Iterable[str]) -> dict[str, list[str]]:
    """ML-stack packages and the spec's companions, other than the one under test, whose version
    differs between the last good and first bad environments: [last good version, first bad version]."""
    s = phase.search
    if s.last_good is None or s.first_bad is None or len(sides) != 2:
        return {}
    own = canonicalize_name(package)
    names = dict.fromkeys([*STACK, *(canonicalize_name(c) for c in companions)])
    (_, good), (_, bad) = sides
    return {n: [good.get(n) or "-", bad.get(n) or "-"] for n in names if n != own and good.get(n) != bad.get(n)}
