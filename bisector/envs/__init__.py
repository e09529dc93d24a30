"""Candidate environments: one Python env per release or commit, sharing a heavy torch base.

Public API: :class:`EnvSpec` / :func:`load_env_spec` (envs/<name>.toml), :class:`InstallTarget`
(the candidate), :class:`EnvManager` (``ensure``, ``using``, ``prefetch``, ``list``, ``gc``),
:class:`Environment` (a ready env and its ``run_env()``) and :class:`EnvInfo` (its info file).
"""
from __future__ import annotations

from bisector.envs.environment import Environment
from bisector.envs.info import EnvInfo
from bisector.envs.manager import EnvManager
from bisector.envs.spec import EnvSpec, InstallTarget, load_env_spec

__all__ = ["EnvInfo", "EnvManager", "EnvSpec", "Environment", "InstallTarget", "load_env_spec"]
