"""torch is a decision, never an accident: which torch the candidate environments run on.

``--torch`` / ``[env] torch``:

* ``current``: bisector's own interpreter's torch (the default when it has one), shared read-only;
* ``X.Y.Z`` (a local label allowed: ``2.13.0+cpu``): one base venv with that torch, built once with pip
  (pip's configuration finds a local wheel) and shared by every candidate; the interpreter's own torch
  when it is that version;
* ``per-candidate``: no shared torch; each environment resolves its own, as of its candidate's date.

When bisector's interpreter has no torch and the job chooses none, the run stops before the first
build and says what each choice would download, a torch the user already has (another interpreter's, a
local wheel) first.
"""
from __future__ import annotations

import importlib.metadata
import sys
from typing import Optional

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bisector.core.requirements import CURRENT, NO_BASE, PER_CANDIDATE, TORCH, same_version
from bisector.sources.install_route import next_to_bisector
from bisector.envs.builders.torch_advice import offers
from bisector.envs.model.env_spec import EnvSpec
from bisector.errors import UsageError




def interpreter_torch() -> Optional[str]:
    """The version of the torch installed for bisector's own interpreter (metadata only, no import)."""
    try:
        return importlib.metadata.version(TORCH)
    except importlib.metadata.PackageNotFoundError:
        return None


def _download(cost: str) -> str:
    """'a 2.42 GiB download' from a cost phrase ('no download' for local files)."""
    return cost.split(" (", 1)[0]


def no_torch_message(index_url: Optional[str]) -> str:
    """Why the run stops when nothing decides the torch: a torch the user already has first (another
    interpreter's, a local wheel pip's configuration offers), else the index's newest, each with what it
    downloads and the command that puts it next to bisector on its install route; then
    ``--torch per-candidate`` with its size (bisector.envs.builders.torch_advice)."""
    here = f"bisector's interpreter ({sys.executable}) has no torch and this job does not choose one"
    found = offers(index_url)
    if not found:
        return (f"{here}. Choose: --torch X.Y.Z (size unknown: neither the index nor pip's configuration offers "
                "a torch) or --torch per-candidate (or [env] torch in bisect.toml)")
    first = found[0]
    beside = next_to_bisector(first.requirement)
    choose = (f"--torch {first.version} ({first.source}: {first.cost})"
              + (f", or put it next to bisector: {beside} ({_download(first.cost)})" if beside else ""))
    newest = found[-1]
    per = (f"else --torch per-candidate (each candidate's torch from the index, a download per version: "
           f"{newest.version}, the newest, is {_download(newest.cost)})")
    return f"{here}. Choose: {choose}; {per} (or [env] torch in bisect.toml)"


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
            found = offers(index_url or spec.index_url)
            beside = next_to_bisector(found[0].requirement) if found else None
            how = (f"install one next to bisector ({beside}: {_download(found[0].cost)}), or choose" if beside
                   else "choose")
            raise UsageError(f"--torch current: bisector's interpreter ({sys.executable}) has no torch; {how} "
                             "--torch X.Y.Z or --torch per-candidate")
        return spec.model_copy(update={"base": CURRENT})
    if have and same_version(have, choice):
        return spec.model_copy(update={"base": CURRENT})   # that torch is here already: nothing to build
    return spec.over({TORCH: f"=={choice}"}, index_url)
