"""The version a commit build gets when its package takes its version from git.

``git archive`` trees have no ``.git``, so setuptools-scm (and hatch-vcs, which uses it) and
pdm's scm backend cannot find one and fail the build. bisector tells them the version through
their "pretend" variables, computed as setuptools-scm's default scheme would from the
repository: the nearest version tag, and when the commit is past it, the next version's
``.devN`` with the commit as local label (``v1.2.0`` + 3 commits -> ``1.2.1.dev3+g<sha12>``).
Packages with a static version ignore these variables.
"""
from __future__ import annotations

import re
from pathlib import Path

from packaging.version import InvalidVersion, Version

from bisector.sources import git_trees

_DESCRIBED = re.compile(r"^(?P<tag>.+)-(?P<distance>\d+)-g[0-9a-f]+$")


def _next_dev(tag: Version, distance: int) -> str:
    if tag.pre is not None:  # 1.0rc1 -> 1.0rc2.devN
        letter, number = tag.pre
        return f"{tag.base_version}{letter}{number + 1}.dev{distance}"
    release = list(tag.release)
    release[-1] += 1
    return ".".join(map(str, release)) + f".dev{distance}"


def commit_version(source: Path, sha: str) -> str:
    """The PEP 440 version setuptools-scm would give commit ``sha`` of the repo at ``source``."""
    m = _DESCRIBED.match(git_trees.describe(source, sha) or "")  # None: no version tag before this commit
    try:
        tag = Version(m.group("tag").lstrip("vV")) if m else None
    except InvalidVersion:
        tag = None
    if tag is None:
        return f"0.1.dev0+g{sha[:12]}"
    distance = int(m.group("distance"))
    return tag.public if distance == 0 else f"{_next_dev(tag, distance)}+g{sha[:12]}"


def pretend_version_env(package: str, version: str) -> dict[str, str]:
    """Variables that make setuptools-scm, hatch-vcs and pdm-backend build ``version``."""
    suffix = re.sub(r"[-_.]+", "_", package).upper()
    return {"SETUPTOOLS_SCM_PRETEND_VERSION": version,
            f"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_{suffix}": version,
            "PDM_BUILD_SCM_VERSION": version}
