"""``--with PKG==VERSION`` pins: exact companion versions laid over an environment spec.

A pin of torch sets the base (``torch==X``: every environment over that torch), since torch is
never a companion; any other pin replaces the spec's companion entry of that name.
"""
from __future__ import annotations

from typing import Optional

from packaging.utils import canonicalize_name

from bisector.envs import EnvSpec
from bisector.envs.model.env_spec import parse_pin
from bisector.errors import UsageError


def apply_pins(spec: EnvSpec, pins: list[str], package: str, index_url: Optional[str]) -> EnvSpec:
    """``spec`` with ``pins`` as exact companions (a torch pin as the base); UsageError on a pin of
    ``package``, the package under test."""
    if not pins:
        return spec
    exact = {}
    for text in pins:
        try:
            name, version = parse_pin(text)
        except ValueError as exc:
            raise UsageError(f"--with {exc}") from None
        if canonicalize_name(name) == canonicalize_name(package):
            raise UsageError(f"--with {text!r} pins {package}, the package under test")
        exact[name] = f"=={version}"
    return spec.over(exact, index_url)
