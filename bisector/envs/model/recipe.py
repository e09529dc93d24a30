"""From (spec, target, base) to a Recipe: the requirement set, cutoff rules and fingerprint."""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Optional

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict

from bisector.envs.model.info import BaseInfo
from bisector.core.requirements import same_version
from bisector.envs.model.fingerprint import dir_name, env_fingerprint
from bisector.envs.model.env_spec import TORCH, EnvSpec, InstallTarget
from bisector.errors import UsageError


class InstallPlan(BaseModel):
    """What to install into a fresh candidate venv, backend-neutral."""

    requirements: list[str]
    constraints: dict[str, str] = {}
    provided: dict[str, str] = {}
    cutoff: Optional[dt.datetime] = None
    lifted: list[str] = []
    index_url: Optional[str] = None
    extra_index_urls: list[str] = []

    def lifted_requirements(self) -> list[str]:
        """Requirements (and constraints) of the lifted packages, for installers lacking per-package cutoffs."""
        names = {canonicalize_name(n) for n in self.lifted}
        out = [r for r in self.requirements if canonicalize_name(Requirement(r).name) in names]
        out += [f"{n}{s}" for n, s in self.constraints.items() if n in names]
        return out


def iso(moment: dt.datetime) -> str:
    """RFC 3339 UTC timestamp (microseconds kept), as installers take it."""
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Recipe(BaseModel):
    """Everything needed to build (or find) one candidate environment."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    spec: EnvSpec
    target: InstallTarget
    base: BaseInfo
    backend: str
    fingerprint: str
    dir_name: str
    extra_requirements: list[str]      # companions + spec requirements
    lifted: list[str]                  # pinned names: installed even if newer than as_of
    constraints: dict[str, str]        # torch's constraints on closure packages not named by the user
    index_url: Optional[str] = None
    extra_index_urls: list[str] = []

    @property
    def python(self) -> Path:
        """The interpreter candidate venvs are made from (the base's)."""
        return Path(self.base.python)

    @property
    def target_in_base(self) -> bool:
        """The candidate is the base's torch: the environment installs only the rest of the spec."""
        return self.target.canonical_name in self.base.provided

    def plan(self, target_requirement: Optional[str], fix: Optional[dict[str, str]] = None) -> InstallPlan:
        """The install plan. ``fix``: torch constraints to enforce, those names freed from the cutoff.

        The first install uses no torch constraints at all (a constraint that no dated
        version meets makes resolvers backtrack to ancient releases); names whose dated
        version misses torch's requirement are then re-resolved through ``fix``.
        """
        fix = dict(fix or {})
        return InstallPlan(
            requirements=[r for r in (target_requirement, *self.extra_requirements) if r],
            constraints=fix, provided=self.base.provided,
            cutoff=self.target.as_of, lifted=sorted(set(self.lifted) | set(fix)),
            index_url=self.index_url, extra_index_urls=self.extra_index_urls,
        )


def spec_for_target(spec: EnvSpec, target: InstallTarget) -> EnvSpec:
    """The spec a candidate is built under: a torch candidate becomes the base (``torch==<version>``)."""
    if target.canonical_name != TORCH:
        return spec
    if target.is_commit or not target.version:
        raise UsageError("torch candidates are releases or nightlies: a torch commit would need a source build of "
                         "torch (hours); bisect releases, or nightly wheels with --mode nightlies --nightly-index URL")
    return spec.model_copy(update={"base": f"torch=={target.version}",
                                   "index_url": target.index_url or spec.index_url})


def _named(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def _check_names(target: InstallTarget, spec: EnvSpec, extra: list[str], base: BaseInfo) -> None:
    names = _named(extra)
    if target.canonical_name in names:
        raise UsageError(f"env spec {spec.name}: {target.package} is the package under test; "
                         "remove it from companions/requirements")
    if target.canonical_name in base.provided and not same_version(base.provided[target.canonical_name],
                                                                   target.version or ""):
        raise UsageError(f"{target.package} is provided by the base ({spec.base}); only torch can be a "
                         "candidate among the base's packages")
    clash = sorted(names & set(base.provided))
    if clash:
        raise UsageError(f"env spec {spec.name}: {clash[0]} comes from the base; "
                         "remove it from companions/requirements")


def _inputs(spec: EnvSpec, target: InstallTarget, base: BaseInfo, backend: str, extra: list[str],
            lifted: list[str], index_url: Optional[str]) -> dict:
    return {
        "python": [os.path.realpath(base.python), base.python_version],
        "base": base.fingerprint,
        "target": [target.canonical_name, target.version, target.revision] + ([target.revert] if target.revert else []),
        "requirements": sorted(extra),
        "lifted": sorted(lifted),
        "as_of": target.as_of.astimezone(dt.timezone.utc).isoformat() if target.as_of else None,
        "index": [index_url, list(spec.extra_index_urls)],
        "backend": backend,
    }


NVML = "nvidia-ml-py"


def cuda_extras(base: BaseInfo, named: set[str]) -> list[str]:
    """What a candidate over a CUDA torch needs for the probe's device facts: NVML's bindings
    (``pynvml``, from nvidia-ml-py), which are not in torch's closure and which the overlay hides.
    A CUDA torch is recognised by the ``nvidia-*`` libraries its closure provides."""
    cuda = any(name.startswith("nvidia-") for name in base.provided)
    return [NVML] if cuda and canonicalize_name(NVML) not in named else []


def make_recipe(spec: EnvSpec, target: InstallTarget, base: BaseInfo, backend: str) -> Recipe:
    """The recipe for ``target`` under ``spec``; UsageError on contradictory names.

    The package under test takes the place of a companion of the same name (the default spec's
    ``transformers = "as-of-candidate"`` when bisecting transformers)."""
    companions = [(req, pinned) for req, pinned in spec.companion_requirements()
                  if canonicalize_name(Requirement(req).name) != target.canonical_name]
    extra = [req for req, _ in companions] + list(spec.requirements)
    _check_names(target, spec, extra, base)
    extra += cuda_extras(base, _named(extra) | {target.canonical_name})
    lifted = [target.canonical_name] + sorted(_named([req for req, pinned in companions if pinned]))
    named = _named(extra) | {target.canonical_name}
    constraints = {n: s for n, s in base.constraints.items() if n not in named}
    index_url = target.index_url or spec.index_url
    fp = env_fingerprint(_inputs(spec, target, base, backend, extra, lifted, index_url))
    return Recipe(
        spec=spec, target=target, base=base, backend=backend, fingerprint=fp,
        dir_name=dir_name(target.canonical_name, target.ref, fp), extra_requirements=extra,
        lifted=lifted, constraints=constraints, index_url=index_url,
        extra_index_urls=list(spec.extra_index_urls),
    )
