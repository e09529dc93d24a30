"""The requirement words the job and the environments share: an exact pin as a typed pair, index URLs,
and which torch the environments run on (the syntax only; what each choice builds is the envs' job)."""
from __future__ import annotations

import re
from typing import NamedTuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from bisector.errors import cut

TORCH = "torch"   # never a companion: a torch version is the base (``torch==X``)
CURRENT, NO_BASE = "current", "none"   # bisector's interpreter's torch; no shared torch (each env its own)
PER_CANDIDATE = "per-candidate"        # --torch per-candidate: each environment resolves its own torch


class Pin(NamedTuple):
    """An exact pin, ``accelerate==0.27.2``, as the pair it is (unpacks as ``name, version``)."""

    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"


def parse_pin(text: str) -> Pin:
    """'accelerate==0.27.2' -> Pin('accelerate', '0.27.2'); ValueError when it is not one exact pin."""
    try:
        req = Requirement(text)
    except InvalidRequirement:
        raise ValueError(f"{cut(text)!r} is not a requirement like accelerate==0.22.0") from None
    pins = [s for s in req.specifier if s.operator in ("==", "===")]
    if len(pins) != 1 or len(req.specifier) != 1 or req.extras or req.marker or req.url:
        raise ValueError(f"{cut(text)!r} must pin one version with ==")
    return Pin(req.name, pins[0].version)


def as_pin(value) -> Pin:
    """A pin given as a Pin, a (name, version) pair, or ``name==version`` text (ValueError otherwise)."""
    if isinstance(value, Pin):
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(x, str) for x in value):
        return Pin(*value)
    if isinstance(value, str):
        return parse_pin(value)
    raise ValueError(f"{cut(value)!r} is not a requirement like accelerate==0.22.0")


def held_pin(value) -> Pin:
    """What an environment held, as a pin: its facts are data (a version its metadata spells oddly is kept as
    written, never refused), ``name==version`` split at its first ``==``."""
    if isinstance(value, (Pin, tuple, list)) and len(value) == 2:
        return Pin(str(value[0]), str(value[1]))
    name, _, version = str(value).partition("==")
    return Pin(name, version)


def check_urls(value):
    """An index URL (or list of them) must be http(s):// or file://."""
    for url in [value] if isinstance(value, str) else (value or []):
        if not re.match(r"^(https?|file)://[^\s]+$", url):
            raise ValueError(f"{cut(url)!r} is not an http(s):// or file:// URL")
    return value


def valid_torch_choice(value: str) -> str:
    """'current', 'per-candidate' or a PEP 440 version; ValueError otherwise."""
    value = value.strip()
    if value in (CURRENT, PER_CANDIDATE):
        return value
    try:
        Version(value.removeprefix("=="))
    except ValueError:   # InvalidVersion, or a number past Python's int-string limit
        raise ValueError(f"{cut(value)!r} is neither 'current', 'per-candidate' nor a torch version like 2.13.0") from None
    return value.removeprefix("==")


def same_version(installed: str, wanted: str) -> bool:
    """PEP 440 ``==``: equal versions; a local label (``+cpu``, ``+cu130``) counts only when ``wanted``
    has one. torch's wheels say ``2.11.0`` in their metadata and ``2.11.0+cu130`` in ``__version__``:
    one torch, whose label is a fact about its build (reported, never part of its identity)."""
    try:
        have, want = Version(installed), Version(wanted)
    except InvalidVersion:
        return installed == wanted
    return have == want if want.local else have.public == want.public
