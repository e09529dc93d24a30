"""Fresh environments built from a repro script's own install lines: what verifying a repro means.

:func:`install_commands` reads the lines the script's header marks as install lines (``# $ ``,
bisector.repro.header), :func:`build_venvs` runs each of them in bash, exactly as printed,
in a new directory, and returns the virtual environments they made. The stand-ins, each said in
what the verification records (:attr:`FreshVenvs.said`):

* ``python3`` is the interpreter the bisect's environments were made from (the header names its
  version);
* torch: after each ``python3 -m venv NAME``, the bisect's own torch is made visible in NAME the way
  every candidate environment sees it (the base's overlay, bisector.envs.builders.overlay), so the
  printed ``torch==X`` is already satisfied and nothing of torch is downloaded again (gigabytes); the
  rest of each line installs as printed, from the index it names;
* a commit's repository: ``$REPO_URL`` is a ``file://`` URL of the bisect's local clone, and a printed
  VCS URL that this machine does not reach (``git+https://github.com/...``) is replaced by that clone's;
* an index URL whose credentials the script shows redacted is used with them.
"""
from __future__ import annotations

import os
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from bisector.repro.header import INSTALL
from bisector.envs import clean_env, install_pth, run_tool, site_packages
from bisector.errors import EnvironmentFailure

INSTALL_TIMEOUT_S = 1800


def install_commands(text: str) -> list[str]:
    """The script's install lines, without their mark (what ``sed -n 's/^# [$] //p'`` gives)."""
    return [line[len(INSTALL):] for line in text.splitlines() if line.startswith(INSTALL)]


@dataclass
class FreshVenvs:
    """The environments the install lines made (name -> directory) and the stand-ins used, in words."""

    venvs: dict[str, Path] = field(default_factory=dict)
    said: list[str] = field(default_factory=list)


def _python_shim(bin_dir: Path, python: Path) -> None:
    """``python3`` (and ``python``) on PATH as ``python`` (a wrapper, so a venv's interpreter keeps its venv)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("python3", "python"):
        shim = bin_dir / name
        shim.write_text(f"#!/bin/sh\nexec {shlex.quote(str(python))} \"$@\"\n")
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _venv_made(command: str) -> Optional[str]:
    """The directory a ``python3 -m venv DIR`` line makes (None: another command)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if words[:3] in (["python3", "-m", "venv"], ["python", "-m", "venv"]) and len(words) >= 4:
        return words[-1]
    return None


def build_venvs(commands: list[str], work: Path, python: Path, overlay: Optional[Path],
                replace: Optional[dict[str, str]] = None, env: Optional[dict[str, str]] = None,
                said: tuple[str, ...] = (), overlays: Optional[dict[str, Path]] = None) -> FreshVenvs:
    """Run ``commands`` in bash in ``work``, one by one, as printed (see the module): ``python`` is
    ``python3``; ``overlay`` (the bisect's torch) is made visible in each venv a line makes; ``replace``:
    printed text -> the stand-in used for it (a VCS URL -> the local clone's); ``env``: variables the
    lines read (``REPO_URL``); ``said``: those stand-ins in words (no path); ``overlays``: a venv's own torch
    by its name (torch under test: each side's). EnvironmentFailure names the line that failed."""
    made = FreshVenvs()
    shims = work / ".bisector-bin"
    _python_shim(shims, python)
    run_env = clean_env({**(env or {}), "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}",
                         "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"})
    run_env.pop("VIRTUAL_ENV", None)
    for number, command in enumerate(commands, 1):
        line = command
        for printed, used in (replace or {}).items():
            line = line.replace(printed, used)
        try:
            run_tool(["bash", "-c", line], f"install line {number}", cwd=work, env=run_env, timeout=INSTALL_TIMEOUT_S)
        except EnvironmentFailure as exc:
            raise EnvironmentFailure(f"the repro's install line {number} ({command[:80]}) failed: {exc}") from None
        name = _venv_made(command)
        if name is not None:
            venv = (work / name).resolve()
            made.venvs[name] = venv
            own = (overlays or {}).get(name, overlay)
            if own is not None:
                install_pth(site_packages(venv), own)
    made.said.append("the install lines ran as printed in fresh venvs, with python3 = the bisect's Python")
    if overlay is not None:
        made.said.append("torch = the bisect's own build, made visible in each venv as in its environments "
                         "(so the printed torch pin was satisfied without downloading it)")
    made.said += list(said)
    return made
