"""The base a spec names, described and ready: this interpreter ("current"), a prefix path, a
``torch==X.Y.Z`` venv built on demand, or "none" (an interpreter that shows candidates nothing)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from bisector.envs.builders import torch_venv
from bisector.envs.tooling.base_info import cached_base, check_python, venv_python
from bisector.envs.model.info import BaseInfo
from bisector.envs.model.layout import CacheLayout
from bisector.envs.model.env_spec import CURRENT, NO_BASE, EnvSpec
from bisector.errors import UsageError


def torch_base_ready(spec: EnvSpec, layout: CacheLayout) -> bool:
    """For a ``torch==X`` base: whether its venv is built already."""
    python = torch_venv.resolve_interpreter(spec.python)
    return torch_venv.torch_base_ready(spec.torch_base_version, python, layout, spec.index_url,
                                      list(spec.extra_index_urls))


def resolve_base(spec: EnvSpec, layout: CacheLayout) -> BaseInfo:
    """The described base of ``spec`` ("current", "none", a path, or "torch==X.Y.Z" built on demand)."""
    if spec.base == CURRENT:
        info = cached_base(CURRENT, Path(sys.executable), layout)
    elif spec.base == NO_BASE:
        info = cached_base(NO_BASE, torch_venv.resolve_interpreter(spec.python), layout)
    elif spec.torch_base_version:
        python = torch_venv.resolve_interpreter(spec.python)
        prefix = torch_venv.ensure_torch_base(
            spec.torch_base_version, python, layout, spec.index_url, spec.extra_index_urls)
        return cached_base(spec.base, prefix / "bin" / "python", layout)
    else:
        prefix = Path(os.path.expanduser(spec.base))
        if not prefix.is_dir():
            raise UsageError(f"env spec {spec.name}: base {spec.base} is not a directory")
        info = cached_base(spec.base, venv_python(prefix), layout)
    check_python(spec, info)
    return info
