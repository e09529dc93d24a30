"""The torches the user has in other interpreters: the ``python3`` / ``python`` on PATH, the active
virtualenv or conda environment, a ``.venv`` in the working directory and pyenv's versions. Each is asked
(metadata only, no ``import torch``) for its torch's version; bisector's own interpreter is left out.
What the no-torch stop offers first is the torch the user already trains with."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, Optional

from packaging.version import InvalidVersion, Version

from bisector.envs.tooling.tool_runs import clean_env

MAX_INTERPRETERS = 12
ASK = ("import sys, importlib.metadata as m\ntry:\n    v = m.version('torch')\nexcept Exception:\n    v = ''\n"
       "print(sys.prefix)\nprint(v)\nprint(sys.executable)")


class OtherTorch(NamedTuple):
    python: str        # the interpreter (its sys.executable: a pyenv shim's real interpreter)
    prefix: str        # its sys.prefix
    version: str       # its torch's version, as its metadata says (2.13.0+cpu)


def interpreters() -> list[Path]:
    """The interpreters a user has besides bisector's own, in the order they are offered."""
    found: list[Path] = []
    for name in ("python3", "python"):
        where = shutil.which(name)
        if where:
            found.append(Path(where))
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        if os.environ.get(var):
            found.append(Path(os.environ[var]) / "bin" / "python")
    found.append(Path.cwd() / ".venv" / "bin" / "python")
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    try:
        found += sorted(pyenv.glob("*/bin/python"))
    except OSError:
        pass
    seen, out = set(), []
    for p in found:
        if p not in seen and os.access(p, os.X_OK) and p.is_file():
            seen.add(p)
            out.append(p)
    return out[:MAX_INTERPRETERS]


def _ask(python: Path) -> Optional[OtherTorch]:
    try:
        done = subprocess.run([str(python), "-c", ASK], capture_output=True, text=True, timeout=30,
                              env=clean_env(), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) < 3 or not lines[1].strip():
        return None
    return OtherTorch(lines[2].strip() or str(python), lines[0].strip(), lines[1].strip())   # the real one, not a shim


def is_release(version: str) -> bool:
    """A real release (a local build label allowed: 2.13.0+cpu), not a nightly, dev or pre-release."""
    try:
        v = Version(version)
    except InvalidVersion:
        return False
    return not (v.is_prerelease or v.is_devrelease)


def other_torches() -> list[OtherTorch]:
    """Each other environment's torch that is a real release, one per environment (bisector's own left
    out), in the order the interpreters were found."""
    pythons = interpreters()
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(_ask, pythons))
    mine, seen, out = os.path.realpath(sys.prefix), set(), []
    for a in answers:
        if a is None or not is_release(a.version):
            continue
        prefix = os.path.realpath(a.prefix)
        if prefix == mine or prefix in seen:
            continue
        seen.add(prefix)
        out.append(a)
    return out
