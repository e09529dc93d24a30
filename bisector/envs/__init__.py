"""Candidate environments: one Python env per release or commit, sharing a heavy torch base.

The face of the package: code outside ``envs/`` imports from here only. Inside, the sub-packages are
layered, each importing only those below it (tests/unit/test_layers.py holds this):

* ``model``: the data (spec, recipe, info files, the cache's layout, a ready environment);
* ``tooling``: running installers and reading installed interpreters (tool runs, bases, file ops);
* ``check``: whether an environment holds exactly its candidate (readiness, health, import proof);
* ``builders``: building environments, torch bases and commit wheels; which torch (``--torch``);
* ``cache``: administration (list, gc, in-use locks, prefetch);
* ``manager``: the build path (``recipe``, ``ensure``, ``using``, ``prefetch``).
"""
from __future__ import annotations

from bisector.envs.builders.base_resolve import resolve_base
from bisector.envs.builders.overlay import ensure_overlay, install_pth, overlay_of
from bisector.envs.builders.torch_advice import local_torches
from bisector.envs.builders.torch_choice import choose_torch
from bisector.envs.builders.torch_size import estimate as estimate_torch_download
from bisector.envs.builders.torch_size import interpreter_tags
from bisector.envs.builders.torch_venv import read_marker, resolve_interpreter, torch_bases
from bisector.envs.cache.admin import EnvCache
from bisector.envs.check.project_url import repository_url
from bisector.envs.check.proof import (HOOK_NAME, MODULES_ENV, PROOF_ENV, homes_of, proof_env, proof_problems,
                                       read_proof, static_report)
from bisector.envs.manager import EnvManager
from bisector.envs.model.env_spec import NO_BASE, TORCH, EnvSpec, InstallTarget, load_env_spec
from bisector.envs.model.environment import Environment, venv_run_env
from bisector.envs.model.fingerprint import index_environment
from bisector.envs.model.info import EnvInfo, read_info
from bisector.envs.model.layout import CacheLayout, site_packages
from bisector.envs.model.recipe import Recipe
from bisector.envs.tooling.base_info import HEAVY
from bisector.envs.tooling.fsops import disk_usage
from bisector.envs.tooling.tool_runs import clean_env, run as run_tool

__all__ = ["HEAVY", "HOOK_NAME", "MODULES_ENV", "NO_BASE", "PROOF_ENV", "TORCH", "CacheLayout", "EnvCache", "EnvInfo",
           "EnvManager", "EnvSpec", "Environment", "InstallTarget", "Recipe", "choose_torch", "clean_env", "disk_usage",
           "ensure_overlay", "estimate_torch_download", "homes_of", "index_environment", "install_pth",
           "overlay_of",
           "interpreter_tags", "load_env_spec", "local_torches", "proof_env", "proof_problems", "read_info",
           "read_marker", "read_proof", "repository_url", "resolve_base", "resolve_interpreter", "run_tool",
           "site_packages", "static_report", "torch_bases", "venv_run_env"]
