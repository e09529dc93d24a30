"""Base venvs for ``base = "torch==X.Y.Z"``: built once with pip, cached, shared by all candidates.

pip (not uv) installs torch here on purpose: pip reads the machine's pip configuration
(find-links, local wheel dirs, constraints), which is where a pre-downloaded torch lives. The venv
is made by virtualenv (a dependency of bisector), which brings its own pip: bisector's interpreter
needs neither pip nor ensurepip.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import Optional

from filelock import FileLock, Timeout
from pydantic import BaseModel

from bisector.envs.builders.backends import pip_index_args
from bisector.envs.builders.base_share import share_libraries
from bisector.envs.builders.torch_size import describe_or_unknown
from bisector.envs.tooling.fsops import discard
from bisector.envs.model.info import utcnow
from bisector.envs.model.layout import CacheLayout
from bisector.envs.builders.once import build_once
from bisector.envs.tooling.tool_runs import clean_env, log, run
from bisector.errors import UsageError
from bisector.safety.safe_write import write_atomic

MARKER = "bisector-base.json"


def resolve_interpreter(request: Optional[str]) -> Path:
    """A python executable for ``request``: None -> this interpreter, a path, or "3.11"."""
    if request is None:
        return Path(sys.executable)
    expanded = os.path.expanduser(request)
    if os.sep in request or os.path.exists(expanded):
        if not os.path.exists(expanded):
            raise UsageError(f"python {request!r} does not exist")
        return Path(expanded)
    found = shutil.which(f"python{request}")
    if not found:
        raise UsageError(f"no python{request} on PATH for the torch base")
    return Path(found)


def torch_base_prefix(version: str, python: Path, layout: CacheLayout, index_url: Optional[str],
                      extra_index_urls: list[str]) -> Path:
    """Where the base venv with ``torch==version`` for ``python`` lives (built or not)."""
    key = hashlib.sha256(
        "\0".join([version, os.path.realpath(python), index_url or "", *extra_index_urls]).encode()
    ).hexdigest()[:12]
    return layout.bases / f"torch-{version}-{key}"


def torch_base_ready(version: str, python: Path, layout: CacheLayout, index_url: Optional[str],
                     extra_index_urls: list[str]) -> bool:
    """Whether that base venv is built."""
    return (torch_base_prefix(version, python, layout, index_url, extra_index_urls) / MARKER).exists()


def _lock_key(prefix: Path) -> str:
    return "base-" + prefix.name.rsplit("-", 1)[-1]


class BaseMarker(BaseModel):
    """``bisector-base.json``: a built torch base, what it cost and what it shares."""

    torch: str
    created: str
    shared_bytes: int = 0       # CUDA library bytes hard-linked to other bases (bisector.envs.builders.base_share)
    shared_with: list[str] = []


def read_marker(prefix: Path) -> Optional[BaseMarker]:
    """The base's marker, or None when it is not a built base."""
    try:
        return BaseMarker.model_validate_json((prefix / MARKER).read_bytes())
    except (OSError, ValueError):
        return None


def ensure_torch_base(version: str, python: Path, layout: CacheLayout, index_url: Optional[str] = None,
                      extra_index_urls: Optional[list[str]] = None) -> Path:
    """The prefix of a venv holding ``torch==version`` for ``python``; built once under a lock. Before
    a build, what it downloads is said (bisector.envs.builders.torch_size); after it, the CUDA libraries it
    has in common with the bases already built are hard-linked to theirs."""
    extra = list(extra_index_urls or [])
    dest = torch_base_prefix(version, python, layout, index_url, extra)
    if (dest / MARKER).exists():
        _touch(dest)
        return dest

    def build(staging: Path) -> None:
        cost = describe_or_unknown(version, python, None, index_url)
        log.warning("building the torch base torch==%s (once; cached in %s): %s", version, dest, cost)
        run([sys.executable, "-m", "virtualenv", "--quiet", "--no-setuptools", "--no-periodic-update",
             "--python", python, staging], "creating the torch base venv", env=clean_env())
        run([staging / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check",
             "--no-input", f"torch=={version}", *pip_index_args(index_url, extra)],
            f"installing torch=={version} into the base", env=clean_env(), timeout=3600)
        shared = share_libraries(staging, [b for b in torch_bases(layout) if (b / MARKER).exists()])
        marker = BaseMarker(torch=version, created=utcnow().isoformat(), shared_bytes=shared.bytes,
                            shared_with=shared.with_bases)
        write_atomic(staging / MARKER, marker.model_dump_json() + "\n")

    return build_once(layout, _lock_key(dest), dest, lambda: dest if (dest / MARKER).exists() else None, build)


def _touch(prefix: Path) -> None:
    """Mark the base as just used (gc keeps recently used bases even before an env refers to them)."""
    try:
        os.utime(prefix / MARKER)
    except OSError:
        pass


def torch_bases(layout: CacheLayout) -> list[Path]:
    """Every built ``torch==X`` base venv in the cache."""
    root = layout.bases
    return sorted(p for p in root.glob("torch-*") if p.is_dir()) if root.is_dir() else []


def last_used(prefix: Path) -> float:
    """When a base was last used (its marker's mtime; ensure_torch_base touches it)."""
    marker = prefix / MARKER
    return marker.stat().st_mtime if marker.exists() else prefix.stat().st_mtime


def remove_base(layout: CacheLayout, prefix: Path) -> bool:
    """Remove one base unless it is being built (its build lock is held); whether it went."""
    try:
        with FileLock(str(layout.lock(_lock_key(prefix))), timeout=0):
            discard(prefix, layout.trash)
            return True
    except Timeout:
        return False
