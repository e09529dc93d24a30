"""Files bisector ships as package data: the built-in probes, environment specs and default job.

Both are read through :mod:`importlib.resources`, so an installed wheel (pip, pipx, uv tool) finds
them wherever it lives; nothing depends on the current directory or on a checkout.
"""
from __future__ import annotations

import importlib.resources
import os
from pathlib import Path


def _dir(name: str) -> Path:
    return Path(str(importlib.resources.files(__name__) / name))


def probes_dir() -> Path:
    """The built-in probes (``BISECTOR_PROBES_DIR`` overrides it, for probe development)."""
    return Path(os.environ.get("BISECTOR_PROBES_DIR") or _dir("probes"))


def specs_dir() -> Path:
    """The built-in environment specs (``default.toml``, ...)."""
    return _dir("specs")


def default_job_path() -> Path:
    """The built-in default job (``bisector run`` with no job file and no flags)."""
    return _dir("default_job.toml")
