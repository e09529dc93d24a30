"""What bisector ships: its version, and as package data the built-in probes, environment specs, default
job and the templates of the repro scripts.

Both are read through :mod:`importlib.resources`, so an installed wheel (pip, pipx, uv tool) finds
them wherever it lives; nothing depends on the current directory or on a checkout.
"""
from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

VERSION = "0.1.0"   # bisector's version (pyproject.toml reads it from here)


def _dir(name: str) -> Path:
    return Path(str(importlib.resources.files(__name__) / name))


def _package(name: str, source: str) -> Path:
    """A data package's directory. In a source tree (this file under ``<tree>/bisector/data`` beside
    ``pyproject.toml``) it is the tree's top-level ``source`` directory (``probes/``, ``envs/``); an
    installed wheel holds them as ``bisector.data.probes`` / ``bisector.data.specs`` (pyproject's
    package-dir), found through importlib.resources."""
    tree = Path(__file__).resolve().parents[2]
    if (tree / "pyproject.toml").is_file() and (tree / source).is_dir():
        return tree / source
    return Path(str(importlib.resources.files(f"{__name__}.{name}")))


def probes_dir() -> Path:
    """The built-in probes (``BISECTOR_PROBES_DIR`` overrides it, for probe development)."""
    return Path(os.environ.get("BISECTOR_PROBES_DIR") or _package("probes", "probes"))


def specs_dir() -> Path:
    """The built-in environment specs (``default.toml``, ...)."""
    return _package("specs", "envs")


def repro_dir() -> Path:
    """The templates of the standalone repro scripts (``bisector report --repro``)."""
    return _dir("repro")


def default_job_path() -> Path:
    """The built-in default job (``bisector run`` with no job file and no flags)."""
    return _dir("default_job.toml")
