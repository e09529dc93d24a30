"""Candidate environments: one Python env per release or commit, sharing a heavy torch base.

Public API: :class:`EnvSpec` / :func:`load_env_spec` (a spec .toml), :class:`InstallTarget`
(the candidate), :class:`EnvManager` (the build path: ``recipe``, ``ensure``, ``using``,
``prefetch``), :class:`EnvCache` (administration: ``list``, ``gc``, ``bases``), :class:`Recipe`,
:class:`Environment` (a ready env and its ``run_env()``) and :class:`EnvInfo` (its info file).
"""
from __future__ import annotations

from bisector.envs.cache.admin import EnvCache
from bisector.envs.model.environment import Environment
from bisector.envs.model.info import EnvInfo
from bisector.envs.manager import EnvManager
from bisector.envs.model.recipe import Recipe
from bisector.envs.model.env_spec import TORCH, EnvSpec, InstallTarget, load_env_spec

__all__ = ["TORCH", "EnvCache", "EnvInfo", "EnvManager", "EnvSpec", "Environment", "InstallTarget", "Recipe",
           "load_env_spec"]
