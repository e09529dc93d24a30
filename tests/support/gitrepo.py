"""Git repositories of a tiny package, with commits at fixed dates, for commit candidates.

The package builds offline: its pyproject names an in-tree PEP 517 backend
(``backend-path``) with no build requirements, so ``uv build`` / ``pip wheel`` need no index.
"""
from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
from pathlib import Path
from typing import Mapping, Sequence

BACKEND = r'''
"""Minimal in-tree PEP 517 backend (stdlib only) for test packages."""
import base64, hashlib, os, re, tomllib, zipfile

def _project():
    with open("pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["project"]

def _hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

def get_requires_for_build_wheel(config_settings=None):
    return []

def get_requires_for_build_sdist(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _project()
    name, version = project["name"], project["version"]
    module = re.sub(r"[-.]+", "_", name).lower()
    dist = f"{module}-{version}"
    meta = [f"Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    wheel_info = b"Wheel-Version: 1.0\nGenerator: tinybackend\nRoot-Is-Purelib: true\nTag: py3-none-any\n\n"
    files = {f"{dist}.dist-info/METADATA": ("\n".join(meta) + "\n\n").encode(),
             f"{dist}.dist-info/WHEEL": wheel_info}
    for root, _, names in os.walk(module):
        for n in sorted(names):
            if n.endswith(".py"):
                path = os.path.join(root, n)
                with open(path, "rb") as fh:
                    files[path.replace(os.sep, "/")] = fh.read()
    record = [f"{p},{_hash(d)},{len(d)}" for p, d in files.items()] + [f"{dist}.dist-info/RECORD,,"]
    files[f"{dist}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    filename = f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w") as zf:
        for p, d in files.items():
            zf.writestr(p, d)
    return filename
'''


def package_files(name: str, version: str, *, dependencies: Sequence[str] = (),
                  module_source: str = "") -> dict[str, str]:
    """The files of a tiny buildable package: pyproject, in-tree backend, module."""
    module = re.sub(r"[-.]+", "_", name).lower()
    deps = ", ".join(f'"{d}"' for d in dependencies)
    pyproject = (
        "[build-system]\nrequires = []\nbuild-backend = \"tinybackend\"\nbackend-path = [\"_build\"]\n\n"
        f"[project]\nname = \"{name}\"\nversion = \"{version}\"\ndependencies = [{deps}]\n"
    )
    return {
        "pyproject.toml": pyproject,
        "_build/tinybackend.py": BACKEND,
        f"{module}/__init__.py": f'__version__ = "{version}"\n{module_source}',
    }


def _git(repo: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=full_env).stdout.strip()


def init_repo(path: Path) -> Path:
    """An empty git repository at ``path`` with a local identity."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    _git(path, "config", "user.name", "Test Author")
    _git(path, "config", "user.email", "test@example.invalid")
    _git(path, "config", "commit.gpgsign", "false")
    return path


def commit(repo: Path, files: Mapping[str, str], message: str, date: dt.datetime) -> str:
    """Write ``files``, commit them at ``date`` (author and committer), return the full SHA."""
    for rel, text in files.items():
        target = repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    _git(repo, "add", "-A")
    stamp = date.isoformat()
    _git(repo, "commit", "-q", "-m", message,
         env={"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
    return _git(repo, "rev-parse", "HEAD")
