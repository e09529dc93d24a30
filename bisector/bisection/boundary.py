"""The environments at the boundary (last good, first bad): facts for the report, and the
companion packages that moved with the candidate (a possible other cause of the step)."""
from __future__ import annotations

import platform
from typing import Iterable, Optional

from packaging.utils import canonicalize_name

from bisector.bisection.phase import PhaseResult
from bisector.core.facts import EnvFacts, ProbeResult
from bisector.core.measurement import Status
from bisector.core.requirements import Pin
from bisector.core.points import PointEnv, RunEnvironment

STACK = ("torch", "transformers", "accelerate")
Side = tuple[ProbeResult, Optional[EnvFacts]]   # (the probe's result, the environment's record of itself)


def _text(value) -> Optional[str]:
    return None if value in (None, "") else str(value)


def environment_facts(result: ProbeResult, env: Optional[EnvFacts], package: str, companions: Iterable[str] = (),
                      own: bool = False) -> PointEnv:
    """Python, torch (its build, local label kept, and where it comes from), CUDA, GPU, driver (or CPU),
    meter and the rest of the ML stack (with ``own`` the package under test too, and ``companions``),
    from the probe's ``result`` (preferred) and the environment's own record ``env``."""
    names = dict.fromkeys([*STACK, *(canonicalize_name(c) for c in companions)])
    recorded = {**({"python": env.python} if env and env.python else {}), **(env.packages if env else {})}
    versions = {**{k: v for k, v in recorded.items() if k == "python" or k in names},
                **{k: v for k, v in result.versions.items() if v and v != "None"}}
    device, under_test = result.device, canonicalize_name(package)
    cuda, cpu = device.type == "cuda", device.type != "cuda" and bool(device.type or device.name)
    packages = {k: _text(versions.get(k)) for k in list(names)[1:] if own or k != under_test}
    return PointEnv(python=_text(versions.get("python")), torch=_text(versions.get("torch")),
                    torch_from=_text(env.torch_from if env else None),
                    # bisecting torch: the commit each build was made from
                    torch_git=_text(env.torch_git if env and under_test == "torch" else None),
                    cuda=_text(device.cuda) if cuda else None, gpu=_text(device.gpu_label) if cuda else None,
                    driver=_text(device.driver) if cuda else None, cpu=device.cpu_label if cpu else None,
                    meter=_text(result.meter), packages={k: v for k, v in packages.items() if v is not None})


def point_environment(side: Side, package: str, companions: Iterable[str]) -> tuple[PointEnv, list[Pin]]:
    """A reported point's environment facts (the package under test and the spec's companions
    included) and every package of it as a pin (what a repro pins)."""
    result, env = side
    pins = sorted(Pin(k, v) for k, v in (env.packages if env else {}).items())
    return environment_facts(result, env, package, companions, own=True), pins


def merge_sides(good: PointEnv, bad: PointEnv) -> PointEnv:
    """One fact per field and package; 'A (last good) / B (first bad)' where the two sides differ."""
    def one(a: Optional[str], b: Optional[str]) -> Optional[str]:
        return a if a == b else f"{a or '-'} (last good) / {b or '-'} (first bad)"

    packages = {k: one(good.packages.get(k), bad.packages.get(k)) for k in dict.fromkeys([*good.packages, *bad.packages])}
    return PointEnv(**{k: one(getattr(good, k), getattr(bad, k)) for k in PointEnv.facts()}, packages=packages)


def judged_side(phase: PhaseResult, index: int, fallback: ProbeResult) -> Side:
    """The probe's result and the environment of candidate ``index`` (judged in ``phase``), as its
    measurements recorded them."""
    ms = phase.judgements[index].measurements
    ok = [m for m in ms if m.status is Status.OK and m.result]
    return (ok[-1].result if ok else fallback), next((m.env for m in ms if m.env), None)


def boundary_sides(phase: PhaseResult, fallback: ProbeResult) -> list[Side]:
    """Last good and first bad (or the first measured candidate when there is no boundary)."""
    s = phase.search
    indices = [i for i in (s.last_good, s.first_bad) if i in phase.judgements] or list(phase.judgements)[:1]
    return [judged_side(phase, index, fallback) for index in indices]


def environment_section(sides: list[Side], package: str, spec_name: str, spec_base: str) -> RunEnvironment:
    """OS, Python, torch, CUDA, GPU, driver, meter and the ML stack: from the probe's result where it
    reports them, else from the environment's info file; one value when both sides agree, both where
    they differ."""
    facts = [environment_facts(result, env, package) for result, env in sides]
    merged = merge_sides(*facts) if len(facts) == 2 else (facts[0] if facts else PointEnv())
    return RunEnvironment(os=platform.platform(), **merged.model_dump(), env_spec=spec_name, env_base=spec_base)


def also_changed(phase: PhaseResult, sides: list[Side], package: str, companions: Iterable[str]) -> dict[str, list[str]]:
    """ML-stack packages and the spec's companions, other than the one under test, whose version
    differs between the last good and first bad environments: [last good version, first bad version]."""
    s = phase.search
    if s.last_good is None or s.first_bad is None or len(sides) != 2:
        return {}
    own = canonicalize_name(package)
    names = dict.fromkeys([*STACK, *(canonicalize_name(c) for c in companions)])
    good, bad = ((env.packages if env else {}) for _, env in sides)
    return {n: [good.get(n) or "-", bad.get(n) or "-"] for n in names if n != own and good.get(n) != bad.get(n)}
