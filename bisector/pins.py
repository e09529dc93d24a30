"""``--with PKG==VERSION`` pins: exact companion versions laid over an environment spec.

A pin of torch sets the base (``torch==X``: every environment over that torch), since torch is
never a companion; any other pin replaces the spec's companion entry of that name.
"""
from __future__ import annotations

from typing import Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from .envs import EnvSpec
from .envs.base import ROOT as TORCH
from .errors import UsageError


def parse_pin(text: str) -> tuple[str, str]:
    """'accelerate==0.27.2' -> ('accelerate', '0.27.2'); ValueError when it is not one exact pin."""
    try:
        req = Requirement(text)
    except InvalidRequirement:
        raise ValueError(f"{text!r} is not a requirement like accelerate==0.22.0") from None
    pins = [s for s in req.specifier if s.operator in ("==", "===")]
    if len(pins) != 1 or len(req.specifier) != 1 or req.extras or req.marker or req.url:
        raise ValueError(f"{text!r} must pin one version with ==")
    return req.name, pins[0].version


def apply_pins(spec: EnvSpec, pins: list[str], package: str, index_url: Optional[str]) -> EnvSpec:
    """``spec`` with ``pins`` as exact companions (a torch pin as the base); UsageError on a pin of
    ``package``, the package under test."""
    companions, update = dict(spec.companions), {}
    for text in pins:
        try:
            name, version = parse_pin(text)
        except ValueError as exc:
            raise UsageError(f"--with {exc}") from None
        if canonicalize_name(name) == canonicalize_name(package):
            raise UsageError(f"--with {text!r} pins {package}, the package under test")
        if canonicalize_name(name) == TORCH:
            update = {"base": f"torch=={version}", "index_url": spec.index_url or index_url}
            continue
        companions = {k: v for k, v in companions.items() if canonicalize_name(k) != canonicalize_name(name)}
        companions[name] = f"=={version}"
    return spec.model_copy(update={"companions": companions, **update}) if pins else spec
