"""Where the environment cache keeps things, under bisector's cache dir.

``envs/<dir name>/`` (ready environments, each with bisector-env.json), ``locks/``, ``tmp/``
(builds in progress), ``trash/`` (things being removed), ``overlays/<base fingerprint>/``,
``bases/`` (described bases, ``torch-X-<key>/`` base venvs), ``wheels/<sha>/`` (commit wheels).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bisector.errors import EnvironmentFailure

PTH_NAME = "zz_bisector_base.pth"           # the .pth that puts a base's overlay on an env's path
COMPLETE = ".bisector-overlay-complete"    # an overlay directory's marker: populated whole


@dataclass(frozen=True)
class CacheLayout:
    """The paths of the environment cache rooted at ``root``."""

    root: Path

    @property
    def envs(self) -> Path:
        return self.root / "envs"

    @property
    def locks(self) -> Path:
        return self.root / "locks"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def trash(self) -> Path:
        return self.root / "trash"

    @property
    def overlays(self) -> Path:
        return self.root / "overlays"

    @property
    def bases(self) -> Path:
        return self.root / "bases"

    @property
    def wheels(self) -> Path:
        return self.root / "wheels"

    def env_dir(self, dir_name: str) -> Path:
        """Where the environment called ``dir_name`` lives."""
        return self.envs / dir_name

    def lock(self, key: str) -> Path:
        """The build lock of ``key`` (held while it is built)."""
        return self.locks / f"{key}.lock"

    def use_lock(self, fingerprint: str) -> Path:
        """The in-use mark of an environment (see bisector.envs.cache.inuse)."""
        return self.locks / f"{fingerprint}.use"

    def create(self) -> "CacheLayout":
        """Make the directories every cache user needs; returns self."""
        for path in (self.envs, self.locks, self.tmp):
            path.mkdir(parents=True, exist_ok=True)
        return self


def site_packages(env_dir: Path) -> Path:
    """The env's site-packages dir."""
    found = sorted(env_dir.glob("lib/python*/site-packages")) or sorted(env_dir.glob("Lib/site-packages"))
    if not found:
        raise EnvironmentFailure(f"no site-packages in {env_dir}")
    return found[0]


def env_python(env_dir: Path) -> Path:
    """The env's interpreter."""
    return env_dir / "bin" / "python"
