"""Where package indexes are: read from the installers' own configuration, never hard-coded.

Order: an explicit URL (CLI or spec), then uv's settings (``UV_DEFAULT_INDEX``, ``UV_INDEX_URL``),
then pip's (``PIP_INDEX_URL``, ``pip config``), then pip's built-in default.
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from typing import Optional


def _pip_config_value(key: str) -> Optional[str]:
    """Read one key from pip's configuration files (``pip config get``)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", key],
            capture_output=True, text=True, timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = proc.stdout.strip()
    return value if proc.returncode == 0 and value else None


def _pip_builtin_default() -> Optional[str]:
    """The index pip uses when nothing is configured, taken from pip itself."""
    try:
        from pip._internal.models.index import PyPI  # type: ignore
    except Exception:  # pragma: no cover - pip always ships it
        return None
    return PyPI.simple_url


@functools.lru_cache(maxsize=None)
def default_index_url() -> str:
    """The primary simple-API index URL the installers on this machine would use."""
    for var in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"):
        value = os.environ.get(var, "").strip()
        if value:
            return value.split()[0]
    value = _pip_config_value("global.index-url") or _pip_builtin_default()
    if not value:
        raise RuntimeError("no package index configured and pip's default is unavailable")
    return value


def resolve_index_url(explicit: Optional[str]) -> str:
    """The explicit URL when given, otherwise the installers' configured default."""
    return explicit.strip() if explicit else default_index_url()
