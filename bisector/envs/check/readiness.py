"""Is a cached environment ready? A cheap look (os.stat and the info file only, no subprocess)."""
from __future__ import annotations

import enum
from pathlib import Path
from typing import Optional

from bisector.envs.model.layout import env_python, site_packages
from bisector.envs.model.info import EnvInfo, InterpreterStamp, read_info
from bisector.envs.model.layout import COMPLETE, PTH_NAME


class State(enum.Enum):
    """What a quick look at an env dir says."""

    MISSING = "missing"      # no dir
    READY = "ready"          # everything in place, interpreter unchanged
    STALE = "stale"          # in place, but the interpreter changed: re-run the health check
    BROKEN = "broken"        # damaged or half-deleted: rebuild


def _required_paths(env_dir: Path, info: EnvInfo) -> list[Path]:
    paths = [env_dir / "pyvenv.cfg", env_dir / info.dist_info / "METADATA"]
    paths += [env_dir / p for p in info.import_paths]
    if info.overlay:
        paths += [Path(info.overlay) / COMPLETE, site_packages(env_dir) / PTH_NAME]
    return paths


def quick_check(env_dir: Path, fingerprint: str) -> tuple[State, Optional[EnvInfo]]:
    """Readiness from os.stat and the info file only (no subprocess)."""
    if not env_dir.exists():
        return State.MISSING, None
    info = read_info(env_dir)
    if info is None or info.fingerprint != fingerprint:
        return State.BROKEN, None
    try:
        if not all(p.exists() for p in _required_paths(env_dir, info)):
            return State.BROKEN, info
    except Exception:  # site-packages gone
        return State.BROKEN, info
    stamp = InterpreterStamp.of(env_python(env_dir))
    if stamp is None:
        return State.BROKEN, info
    return (State.READY if stamp == info.interpreter else State.STALE), info
