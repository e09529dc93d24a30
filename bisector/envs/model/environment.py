"""A ready environment, and the variables a probe runs under in it."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from bisector.envs.model.info import EnvInfo

REDIRECTING_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE")   # variables that would send a probe's interpreter elsewhere


@dataclass(frozen=True)
class Environment:
    """A built, health-checked candidate environment.

    ``path`` is the venv, ``python`` its interpreter, ``info`` what it holds (also in
    ``<path>/bisector-env.json``), ``env_vars`` the spec's extra variables for probe runs.
    """

    path: Path
    python: Path
    fingerprint: str
    info: EnvInfo
    env_vars: dict[str, str] = field(default_factory=dict)

    def run_env(self) -> dict[str, str]:
        """Variables for running a probe: env bin first on PATH, VIRTUAL_ENV, spec env_vars.

        PYTHONPATH, PYTHONHOME, PYTHONSTARTUP and PYTHONUSERBASE are removed and
        PYTHONNOUSERSITE=1 is set, so nothing redirects imports away from the env.
        """
        return venv_run_env(self.path, self.env_vars)


def venv_run_env(env_dir: Path, env_vars: Mapping[str, str]) -> dict[str, str]:
    """os.environ for running in ``env_dir`` (see :meth:`Environment.run_env`)."""
    env = {k: v for k, v in os.environ.items() if k not in REDIRECTING_VARS}
    env.pop("__PYVENV_LAUNCHER__", None)
    path = env.get("PATH", "")
    env["PATH"] = str(env_dir / "bin") + (os.pathsep + path if path else "")
    env["VIRTUAL_ENV"] = str(env_dir)
    env["PYTHONNOUSERSITE"] = "1"
    env.update(env_vars)
    return env
