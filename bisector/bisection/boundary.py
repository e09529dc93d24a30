"""The environments at the boundary (last good, first bad): facts for the report, and the
companion packages that moved with the candidate (a possible other cause of the step)."""
from __future__ import annotations

import platform
from typing import Iterable

from packaging.utils import canonicalize_name

from bisector.bisection.phase import PhaseResult
from bisector.core.facts import ProbeResult
from bisector.core.measurement import Status
from bisector.core.requirements import Pin
from bisector.core.points import PointEnv

STACK = ("torch", "transformers", "accelerate")
Side = tuple[ProbeResult, dict]   # (the probe's result, the environment's name -> version)


def environment_facts(result: ProbeResult, env: dict, package: str, companions: Iterable[str] = (),
                      own: bool = False) -> dict:
    """Python, torch (its build, local label kept, and where it comes from), CUDA, GPU, driver (or CPU),
    meter and the rest of the ML stack (with ``own`` the package under test too, and ``companions``),
    from the probe's ``result`` (preferred) and the environment's own record ``env``."""
    names = dict.fromkeys([*STACK, *(canonicalize_name(c) for c in companions)])
    versions = {**{k: v for k, v in env.items() if k == "python" or k in names},
                **{k: v for k, v in result.versions.items() if v and v != "None"}}
    device = result.device
    facts = {"python": versions.get("python"), "torch": versions.get("torch"), "torch from": env.get("torch from")}
    if canonicalize_name(package) == "torch":   # bisecting torch: the commit each build was made from
        facts["torch git"] = env.get("torch git")
    if device.type == "cuda":
        facts.update(cuda=device.cuda, gpu=device.gpu_label, driver=device.driver)
    elif device.type or device.name:
        facts["cpu"] = device.cpu_label
    facts["meter"] = result.meter
    under_test = canonicalize_name(package)
    facts.update({k: versions.get(k) for k in list(names)[1:] if own or k != under_test})
    return {k: str(v) for k, v in facts.items() if v not in (None, "")}


def point_environment(side: Side, package: str, companions: Iterable[str]) -> tuple[PointEnv, list[Pin]]:
    """A reported point's environment facts (the package under test and the spec's companions
    included) and every package of it as a pin (what a repro pins)."""
    result, env = side
    pins = sorted(Pin(k, v) for k, v in env.items() if k not in ("python", "torch from", "torch git"))
    return PointEnv.model_validate(environment_facts(result, env, package, companions, own=True)), pins


def merge_sides(good: dict, bad: dict) -> dict:
    """One fact per key; 'A (last good) / B (first bad)' where the two sides differ."""
    out = {}
    for key in dict.fromkeys([*good, *bad]):
        a, b = good.get(key), bad.get(key)
        out[key] = a if a == b else f"{a or '-'} (last good) / {b or '-'} (first bad)"
    return out


def judged_side(phase: PhaseResult, index: int, fallback: ProbeResult) -> Side:
    """The probe's result and the environment of candidate ``index`` (judged in ``phase``), as its
    measurements recorded them."""
    ms = phase.judgements[index].measurements
    ok = [m for m in ms if m.status is Status.OK and m.result]
    env = next((m.env.versions() for m in ms if m.env), {})
    return (ok[-1].result if ok else fallback), env


def boundary_sides(phase: PhaseResult, fallback: ProbeResult) -> list[Side]:
    """Last good and first bad (or the first measured candidate when there is no boundary)."""
    s = phase.search
    indices = [i for i in (s.last_good, s.first_bad) if i in phase.judgements] or list(phase.judgements)[:1]
    return [judged_side(phase, index, fallback) for index in indices]


def environment_section(sides: list[Side], package: str, spec_name: str, spec_base: str) -> dict:
    """OS, Python, torch, CUDA, GPU, driver, meter and the ML stack: from the probe's result where it
    reports them, else from the environment's info file; shown once when both sides agree, side by
    side where they differ."""
    facts = [environment_facts(result, env, package) for result, env in sides]
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
