"""How this bisector was installed, and the command that puts another package next to it on that route.

The command and the import are ``bisector``; the distribution's name is pyproject's, read here from
importlib.metadata at run time (the distribution that provides the ``bisector`` import package), never a
constant. Routes: pipx (a venv with ``pipx_metadata.json``: ``pipx inject <its venv> ...``), uv tool
(``uv-receipt.toml``: ``uv tool install --reinstall <its source> --with ...``), an environment without
pip (a ``uv venv``: ``uv pip install --python <interpreter> ...``), else ``<interpreter> -m pip install``.
No suggestion installs bisector itself by name: it is not published on a package index.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import shlex
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Optional

from packaging.utils import canonicalize_name

IMPORT_NAME = "bisector"


@functools.lru_cache(maxsize=None)
def distribution() -> Optional[str]:
    """The name of the installed distribution that provides the ``bisector`` package (as its metadata
    spells it), preferring the one whose files hold this very module; None when none is installed."""
    names = list(dict.fromkeys(importlib.metadata.packages_distributions().get(IMPORT_NAME) or []))
    here = Path(__file__).resolve()
    for name in names:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if any(Path(str(dist.locate_file(f))).resolve() == here for f in dist.files or []
               if f.name == here.name):
            return dist.metadata["Name"]
    for name in names:
        try:
            return importlib.metadata.distribution(name).metadata["Name"]
        except importlib.metadata.PackageNotFoundError:
            continue
    return None



def _same_distribution(name: object) -> bool:
    mine = distribution()
    return isinstance(name, str) and mine is not None and canonicalize_name(name) == canonicalize_name(mine)


def uv_source(prefix: Path) -> Optional[str]:
    """The source ``uv tool install`` installed bisector from (its receipt), as uv takes it back."""
    try:
        receipt = tomllib.loads((prefix / "uv-receipt.toml").read_text())
    except (OSError, ValueError):
        return None
    for req in (receipt.get("tool") or {}).get("requirements") or []:
        if not isinstance(req, dict) or not _same_distribution(req.get("name")):
            continue
        for key in ("editable", "directory", "path", "url"):
            if isinstance(req.get(key), str):
                return ("--editable " if key == "editable" else "") + shlex.quote(req[key])
        if isinstance(req.get("git"), str):
            return shlex.quote("git+" + req["git"].removeprefix("git+"))
    return None


def pipx_venv(prefix: Path) -> str:
    """The name ``pipx inject`` takes for this venv: its main package (the distribution's name, as
    pipx_metadata.json records it) with its ``--suffix``; the venv's folder name when that is unreadable."""
    try:
        main = json.loads((prefix / "pipx_metadata.json").read_text()).get("main_package") or {}
        if _same_distribution(main.get("package")):
            return str(main["package"]) + str(main.get("suffix") or "")
    except (OSError, ValueError, AttributeError):
        pass
    return prefix.name


def has_pip() -> bool:
    """Whether pip is importable by bisector's interpreter (a ``uv venv`` has none)."""
    return importlib.util.find_spec("pip") is not None


def route() -> tuple[str, Optional[str]]:
    """How bisector was installed: ('pipx', venv name), ('uv', source or None), ('uv-venv', None) for an
    environment without pip, or ('pip', None)."""
    prefix = Path(sys.prefix)
    if (prefix / "pipx_metadata.json").exists():
        return "pipx", pipx_venv(prefix)
    if (prefix / "uv-receipt.toml").exists():
        return "uv", uv_source(prefix)
    if not has_pip():
        return "uv-venv", None
    return "pip", None


def _uv() -> str:
    """uv as the user runs it: 'uv' when it is on PATH, else the binary bisector's uv package ships."""
    if shutil.which("uv"):
        return "uv"
    from bisector.sources.installer_config import uv_binary   # noqa: PLC0415 (its import is not cheap)
    return shlex.quote(uv_binary() or "uv")


def next_to_bisector(requirement: str) -> Optional[str]:
    """The command that installs ``requirement`` (``torch==X``, a wheel's path, ``ray>=2.40``) next to
    bisector on its install route; None where no runnable one can be said (a uv tool whose source is
    unknown)."""
    how, detail = route()
    requirement = shlex.quote(requirement)
    if how == "pipx":
        return f"pipx inject {shlex.quote(str(detail))} {requirement}"
    if how == "uv":
        return f"uv tool install --reinstall {detail} --with {requirement}" if detail else None
    if how == "uv-venv":
        return f"{_uv()} pip install --python {shlex.quote(sys.executable)} {requirement}"
    return f"{shlex.quote(sys.executable)} -m pip install {requirement}"
