"""``--with PKG==VERSION`` pins: exact companion versions laid over an environment spec.

A pin of torch sets the base (``torch==X``: every environment over that torch), since torch is
never a companion, as ``--torch X`` does; any other pin replaces the spec's companion entry of that name.
"""
from __future__ import annotations

from typing import Iterable, Optional, Union

from packaging.utils import canonicalize_name

from bisector.envs import TORCH, EnvSpec
from bisector.envs import choose_torch
from bisector.core.requirements import Pin, as_pin
from bisector.errors import UsageError


def apply_pins(spec: EnvSpec, pins: Iterable[Union[Pin, str]], package: str, index_url: Optional[str],
               torch: Optional[str] = None) -> EnvSpec:
    """``spec`` with the ``torch`` choice (``--torch``, see bisector.envs.builders.torch_choice) and then
    ``pins`` as exact companions (a torch pin as the base); UsageError on a pin of ``package``, the
    package under test, on torch chosen twice, and when nothing decides the torch and bisector's
    interpreter has none."""
    exact = {}
    for given in pins:
        try:
            name, version = as_pin(given)
        except ValueError as exc:
            raise UsageError(f"--with {exc}") from None
        if canonicalize_name(name) == canonicalize_name(package):
            raise UsageError(f"--with {f'{name}=={version}'!r} pins {package}, the package under test")
        exact[name] = f"=={version}"
    pinned_torch = any(canonicalize_name(name) == TORCH for name in exact)
    if torch is not None and pinned_torch:
        raise UsageError("torch is chosen twice (--torch and --with torch==...): give one")
    spec = spec if pinned_torch else choose_torch(spec, torch, package, index_url)
    return spec.over(exact, index_url) if exact else spec
