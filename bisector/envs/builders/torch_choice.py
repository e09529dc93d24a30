"""torch is a decision, never an accident: which torch the candidate environments run on.

``--torch`` / ``[env] torch``:

* ``current``: bisector's own interpreter's torch (the default when it has one), shared read-only;
* ``X.Y.Z`` (a local label allowed: ``2.13.0+cpu``): one base venv with that torch, built once with pip
  (pip's configuration finds a local wheel) and shared by every candidate; the interpreter's own torch
  when it is that version;
* ``per-candidate``: no shared torch; each environment resolves its own, as of its candidate's date.

When bisector's interpreter has no torch and the job chooses none, the run stops before the first
build and says what each choice would download, a torch already here (a local wheel) first.
"""
from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path
from typing import Optional

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bisector.core.requirements import same_version
from bisector.envs.builders.torch_advice import local_torches, next_to_bisector
from bisector.envs.builders.torch_size import describe_or_unknown
from bisector.core.requirements import CURRENT, NO_BASE, PER_CANDIDATE, TORCH
from bisector.envs.model.env_spec import EnvSpec
from bisector.errors import BisectorError, UsageError
from bisector.sources.index import list_releases
from bisector.sources.installer_config import resolve_index_url




def interpreter_torch() -> Optional[str]:
    """The version of the torch installed for bisector's own interpreter (metadata only, no import)."""
    try:
        return importlib.metadata.version(TORCH)
    except importlib.metadata.PackageNotFoundError:
        return None


def _newest_torch(index_url: Optional[str]) -> Optional[str]:
    try:
        releases = [r for r in list_releases(resolve_index_url(index_url), TORCH) if r.usable]
    except BisectorError:
        return None
    return releases[-1].version if releases else None


def no_torch_message(index_url: Optional[str]) -> str:
    """Why the run stops when nothing decides the torch: a torch already here first (a local wheel pip's
    configuration offers), then one from the index, each with what it downloads and the command that
    puts it next to bisector on its install route (bisector.envs.builders.torch_advice)."""
    python, version = Path(sys.executable), sys.version.split()[0]
    here = f"bisector's interpreter ({sys.executable}) has no torch and this job does not choose one"
    local = local_torches()
    if local:
        t = local[0]
        cost = describe_or_unknown(t.version, python, version, index_url).removeprefix(f"torch {t.version}: ")
        beside = next_to_bisector(str(t.wheel))
        first = (f"--torch {t.version} (a wheel pip's configuration offers locally: {cost})"
                 + (f", or put that wheel next to bisector: {beside}" if beside else ""))
        rest = "else --torch per-candidate (each candidate's own torch from the index)"
    else:
        newest = _newest_torch(index_url)
        cost = describe_or_unknown(newest, python, version, index_url).removeprefix(f"torch {newest}: ") \
            if newest else "size unknown: the index lists no torch"
        example = newest or "X.Y.Z"
        beside = next_to_bisector(f"torch=={example}") if newest else None
        first = (f"--torch {example} ({cost}; built once)"
                 + (f", or put it next to bisector: {beside} (the same download)" if beside else ""))
        rest = "or --torch per-candidate (each candidate's own: a download per torch version)"
    return f"{here}. Choose: {first}; {rest}; [env] torch in bisect.toml does the same"


def _with_torch_requirement(spec: EnvSpec) -> list[str]:
    named = {canonicalize_name(Requirement(r).name) for r in spec.requirements}
    return list(spec.requirements) + ([] if TORCH in named else [TORCH])


def choose_torch(spec: EnvSpec, choice: Optional[str], package: str, index_url: Optional[str] = None) -> EnvSpec:
    """``spec`` with the torch ``choice`` applied (None: the spec's own base); UsageError when the choice
    cannot hold, or when nothing decides and bisector's interpreter has no torch."""
    if canonicalize_name(package) == TORCH:
        if choice:
            raise UsageError("--torch chooses the torch under the candidates; bisecting torch, each torch release "
                             "is its own base")
        return spec
    have = interpreter_torch()
    if choice is None:
        if spec.base == CURRENT and not have:
            raise UsageError(no_torch_message(index_url or spec.index_url))
        return spec
    if choice == PER_CANDIDATE:
        return spec.model_copy(update={"base": NO_BASE, "requirements": _with_torch_requirement(spec)})
    if choice == CURRENT:
        if not have:
            local = local_torches()
            beside = next_to_bisector(str(local[0].wheel) if local else "torch")
            how = f"install one next to bisector ({beside}), or choose" if beside else "choose"
            raise UsageError(f"--torch current: bisector's interpreter ({sys.executable}) has no torch; {how} "
                             "--torch X.Y.Z or --torch per-candidate")
        return spec.model_copy(update={"base": CURRENT})
    if have and same_version(have, choice):
        return spec.model_copy(update={"base": CURRENT})   # that torch is here already: nothing to build
    return spec.over({TORCH: f"=={choice}"}, index_url)
