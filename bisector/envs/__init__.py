"""Candidate environments: one Python env per release or commit, sharing a heavy torch base.

Public API: :class:`EnvSpec` / :func:`load_env_spec` (a spec .toml), :class:`InstallTarget`
(the candidate), :class:`EnvManager` (the build path: ``recipe``, ``ensure``, ``using``,
``prefetch``), :class:`EnvCache` (administration: ``list``, ``gc``, ``bases``), :class:`Recipe`,
:class:`Environment` (a ready env and its ``run_env()``), :class:`EnvInfo` (its info file), and for a
nightly's checks the interpreter bases are made from (:func:`resolve_interpreter`) and the wheel tags
it installs (:func:`interpreter_tags`).
"""
from __future__ import annotations

from bisector.envs.builders.torch_size import interpreter_tags
from bisector.envs.builders.torch_venv import resolve_interpreter
from bisector.envs.cache.admin import EnvCache
from bisector.envs.model.environment import Environment
from bisector.envs.model.info import EnvInfo
from bisector.envs.manager import EnvManager
from bisector.envs.model.recipe import Recipe
from bisector.envs.model.env_spec import TORCH, EnvSpec, InstallTarget, load_env_spec

__all__ = ["TORCH", "EnvCache", "EnvInfo", "EnvManager", "EnvSpec", "Environment", "InstallTarget", "Recipe",
           "interpreter_tags", "load_env_spec", "resolve_interpreter"]
