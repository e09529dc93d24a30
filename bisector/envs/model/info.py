"""The info file of a built environment (``bisector-env.json``) and how it is stored."""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, ValidationError

from bisector.core.requirements import TORCH
from bisector.envs.model.env_spec import InstallTarget
from bisector.redact import redact_text
from bisector.safety.safe_write import write_atomic

INFO_NAME = "bisector-env.json"
SCHEMA = 1


def utcnow() -> dt.datetime:
    """Now, timezone-aware (UTC)."""
    return dt.datetime.now(dt.timezone.utc)


class InterpreterStamp(BaseModel):
    """Cheap identity of an interpreter: where ``bin/python`` resolves and that file's stat."""

    model_config = ConfigDict(frozen=True)

    realpath: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, python: Path) -> Optional["InterpreterStamp"]:
        """Stamp of ``python`` now, or None when it does not resolve to a file."""
        real = os.path.realpath(python)
        try:
            st = os.stat(real)
        except OSError:
            return None
        return cls(realpath=real, size=st.st_size, mtime_ns=st.st_mtime_ns)


class EnvInfo(BaseModel):
    """What an environment holds and how it was made; written last, so it marks a ready env."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = SCHEMA
    fingerprint: str
    dir_name: str
    spec_name: str
    target: InstallTarget
    installed_version: str
    installed_revision: Optional[str] = None
    import_paths: list[str] = []         # the imported modules' files, relative to the env
    dist_info: str                      # the target's .dist-info, relative to the env
    resolved: list[str]                 # "name==version" of everything in the env's own site-packages
    lifted: list[str] = []              # packages resolved without the as-of cutoff
    base: str                           # the base as written in the spec
    base_fingerprint: str
    overlay: Optional[str] = None       # overlay dir the env's .pth points at
    provided: dict[str, str] = {}       # name -> version taken from the base
    torch: Optional[str] = None         # torch's build version (local label kept: 2.11.0+cu130)
    torch_from: Optional[str] = None    # where that torch comes from (the interpreter, a base venv, the env)
    torch_git: Optional[str] = None     # the commit it was built from (torch/version.py's git_version)
    python_version: str
    interpreter: InterpreterStamp
    backend: str
    created: dt.datetime
    last_used: dt.datetime
    build_seconds: float = 0.0
    health_seconds: float = 0.0         # of build_seconds: the health check (importing the package)
    health: str = "imported"            # imported (a health check's import), static (read from disk: a
                                        # probe's proof still needed), proved (by a probe's imports)
    import_names: list[str] = []        # the candidate's top-level modules (what a proof must name)
    size_bytes: int = 0                 # extra disk: blocks of inodes held only by this env
    apparent_bytes: int = 0             # plain sum of file sizes


def read_info(env_dir: Path) -> Optional[EnvInfo]:
    """The env's info, or None when missing, unreadable or of another schema."""
    try:
        info = EnvInfo.model_validate_json((env_dir / INFO_NAME).read_bytes())
    except (OSError, ValidationError, ValueError):
        return None
    return info if info.schema_version == SCHEMA else None


def write_info(env_dir: Path, info: EnvInfo) -> None:
    """Store the env's info atomically (an index URL's credentials masked: only the recipe in memory holds them)."""
    write_atomic(env_dir / INFO_NAME, redact_text(info.model_dump_json(indent=1), home=False))


class BaseDist(BaseModel):
    """One installed distribution of the base that candidates may see."""

    name: str
    version: str
    dist_info: str
    site_dir: str


class BaseInfo(BaseModel):
    """A described base: interpreter, torch closure, provided set, constraints, fingerprint."""

    spec: str
    python: str
    python_version: str
    site_dirs: list[str]
    markers: dict[str, str]
    closure: list[BaseDist]
    provided: dict[str, str]
    constraints: dict[str, str]
    stamp: dict[str, object]
    fingerprint: str
    torch_build: Optional[str] = None   # torch's own __version__, local label kept (2.11.0+cu130)
    torch_git: Optional[str] = None     # the commit torch was built from (its version.py's git_version)

    @property
    def torch_version(self) -> Optional[str]:
        """The base's torch version, if it has torch."""
        return self.provided.get(TORCH)
