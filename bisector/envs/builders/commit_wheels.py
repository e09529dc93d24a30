"""Commit candidates: ``git archive`` of exactly that SHA, built to a wheel once, stamped, cached.

The source comes from ``git archive <sha>`` (never the user's working copy). When the
interpreter running bisector is the base's and already has the build requirements
(setuptools, say), the wheel is built without an isolated build env: no index needed,
much faster. Packages versioned from git tags (setuptools-scm, hatch-vcs, pdm) are told the
version the repository gives the commit (see scm_version). The wheel gets
``<dist-info>/bisector_revision`` holding the SHA, so the health check can prove the
installed package is that commit. Wheels are cached in ``<cache>/wheels/<sha>/``.

A commit with another commit's change reverted (a culprit's confirmation) is built from the reverted
git tree (``git archive`` of that tree, see sources.git_trees.reverted_tree), stamped
``<sha>-revert-<culprit sha>`` and cached in ``<cache>/wheels/<sha>-revert-<culprit sha>/``.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path
from typing import Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from bisector.envs.builders.backends import Backend
from bisector.envs.model.recipe import InstallPlan
from bisector.envs.model.layout import CacheLayout
from bisector.envs.builders.once import build_once
from bisector.envs.builders.scm_version import commit_version, pretend_version_env
from bisector.envs.model.env_spec import InstallTarget, valid_sha
from bisector.errors import EnvironmentFailure
from bisector.sources import git, git_trees
from bisector.safety import safe_toml

REVISION_FILE = "bisector_revision"


def archive(source: Path, sha: str, dest: Path, revert: Optional[str] = None) -> None:
    """Extract the tree of commit ``sha`` of the repo at ``source`` into ``dest`` (with commit ``revert``'s
    change reverted on top, when given; EnvironmentFailure when that revert does not apply)."""
    sha = valid_sha(sha)
    tar_path = dest.with_suffix(".tar")
    try:
        tree = _reverted(source, sha, revert, dest.parent) if revert else None
        git_trees.archive(source, sha, tar_path, tree=tree)
    except git.GitFailure as exc:
        what = f"commit {sha[:10]} not in {source}" if exc.command == "cat-file" else f"git {exc.command}"
        raise EnvironmentFailure(f"{what}: {exc.reason}") from None
    dest.mkdir(parents=True)
    with tarfile.open(tar_path) as tar:
        try:
            tar.extractall(dest, filter="data")
        except TypeError:  # pragma: no cover - Python without extraction filters
            tar.extractall(dest)
    tar_path.unlink()


def _reverted(source: Path, sha: str, revert: str, scratch: Path) -> str:
    """The git tree of ``sha`` with ``revert``'s change reverted (the same tree the confirmation checked)."""
    tree, conflicts = git_trees.reverted_tree(source, sha, valid_sha(revert), scratch)
    if tree is None:
        raise EnvironmentFailure(f"reverting {revert[:10]} on {sha[:10]} conflicts in {', '.join(conflicts)}")
    return tree


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def stamp_wheel(wheel: Path, sha: str) -> None:
    """Add ``<dist-info>/bisector_revision`` (the SHA) to a wheel, RECORD included."""
    with zipfile.ZipFile(wheel) as zf:
        infos = zf.infolist()
        records = [i.filename for i in infos if i.filename.count("/") == 1
                   and i.filename.split("/")[0].endswith(".dist-info") and i.filename.endswith("/RECORD")]
        if not records:
            raise EnvironmentFailure(f"built wheel {wheel.name} has no RECORD")
        record_name = records[0]
        stamp_name = record_name.rsplit("/", 1)[0] + "/" + REVISION_FILE
        data = f"{sha}\n".encode()
        record = zf.read(record_name).decode().rstrip("\n")
        record += f"\n{stamp_name},{_record_hash(data)},{len(data)}\n"
        tmp = wheel.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
            for info in infos:
                if info.filename not in (record_name, stamp_name):
                    out.writestr(info, zf.read(info))
            out.writestr(stamp_name, data)
            out.writestr(record_name, record)
    os.replace(tmp, wheel)


def cached_wheel(wheel_dir: Path, package: str) -> Optional[Path]:
    """The cached wheel of ``package`` in ``wheel_dir``, if any."""
    if not wheel_dir.is_dir():
        return None
    for wheel in wheel_dir.glob("*.whl"):
        if canonicalize_name(wheel.name.split("-")[0]) == canonicalize_name(package):
            return wheel
    return None


def build_requirements(src: Path) -> list[str]:
    """[build-system].requires of a source tree (PEP 518 default when absent)."""
    try:
        data = safe_toml.loads((src / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        data = {}
    system = data.get("build-system") or {}
    return list(system.get("requires", ["setuptools>=40.8.0"]))


def satisfied_here(requirements: list[str]) -> bool:
    """Whether this interpreter already has every build requirement (so no isolated build env)."""
    for line in requirements:
        try:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate():
                continue
            have = importlib.metadata.version(req.name)
        except (InvalidRequirement, importlib.metadata.PackageNotFoundError):
            return False
        if not req.specifier.contains(have, prereleases=True):
            return False
    return True


def _build(target: InstallTarget, backend: Backend, python: Path, plan: InstallPlan, out: Path) -> None:
    """Build the stamped wheel of ``target`` alone into ``out`` (its parent is scratch space)."""
    src = out.parent / "src"
    archive(target.source, target.revision, src, revert=target.revert)
    out.mkdir()
    same_python = os.path.realpath(python) == os.path.realpath(sys.executable)
    isolated = not (same_python and satisfied_here(build_requirements(src)))
    version = commit_version(target.source, target.revision)  # for packages versioned by git tags
    backend.build_wheel(src, out, python, plan, isolated=isolated,
                        env_vars=pretend_version_env(target.package, version))
    wheel = cached_wheel(out, target.package)
    if wheel is None:
        built = ", ".join(p.name for p in out.iterdir()) or "nothing"
        raise EnvironmentFailure(f"building {target.ref} gave {built}, not a {target.package} wheel")
    stamp_wheel(wheel, target.stamp)
    for other in out.iterdir():
        if other != wheel:
            other.unlink()


def commit_wheel(target: InstallTarget, backend: Backend, python: Path, plan: InstallPlan,
                 layout: CacheLayout) -> Path:
    """The stamped wheel of the commit ``target`` names; built once per SHA (per SHA and reverted SHA)."""
    sha = valid_sha(target.revision or "")
    key = sha + (f"-revert-{valid_sha(target.revert)}" if target.revert else "")
    wheel_dir = layout.wheels / key
    return build_once(layout, f"wheel-{key}", wheel_dir, lambda: cached_wheel(wheel_dir, target.package),
                      lambda out: _build(target, backend, python, plan, out))
