"""What a repository must be before a bisect may start on it: git's environment left alone, a local
repository that is one, and one that builds the package being bisected (checked from its files at the
bad end, without building anything)."""
from __future__ import annotations

import configparser
import os
import shutil
import re
import tomllib
from pathlib import Path
from typing import Optional

from packaging.utils import canonicalize_name

from bisector.errors import UsageError
from bisector.sources import git
from bisector.safety import safe_toml

_SETUP_NAME = re.compile(r"""\bname\s*=\s*["']([A-Za-z0-9][A-Za-z0-9._-]*)["']""")


def check_git_environment() -> None:
    """Refuse to run git with a variable set that would point it at another repository than --repo, or
    without git on PATH (one line, before anything is created)."""
    if shutil.which("git") is None:
        raise UsageError("git is not on PATH: a commit bisect and --repo need it (install git, or bisect releases)")
    for name in git.GIT_REDIRECTS:
        if os.environ.get(name):
            raise UsageError(f"{name} is set in the environment ({os.environ[name]}): git would read that instead "
                             f"of --repo; unset it (bisector runs git in the repository it is given)")


def local_repository(repo: str) -> Path:
    """The path of a local repository given as --repo, or a usage error saying what it is instead."""
    if repo.startswith("-"):
        raise UsageError(f"invalid repository {repo!r}")
    path = Path(repo).expanduser()
    if not path.exists():
        raise UsageError(f"repository {repo} not found (no such directory)")
    if not path.is_dir():
        raise UsageError(f"repository {repo} is a file, not a git repository")
    top = git.work_tree_top(path)
    if top is not None and top.resolve() != path.resolve():
        raise UsageError(f"repository {repo} is a directory inside the git repository {top}: --repo {top}")
    return git.local_repo(repo)


def package_at(repo: Path, ref: str) -> Optional[tuple[str, str]]:
    """(the distribution name the repository's files at ``ref`` declare, the file that says so), or None."""
    for file in ("pyproject.toml", "setup.cfg", "setup.py"):
        text = git.show_file(repo, ref, file)
        if text is None:
            continue
        name = _declared_name(file, text)
        if name:
            return name, file
    return None


def _declared_name(file: str, text: str) -> Optional[str]:
    try:
        if file == "pyproject.toml":
            return ((safe_toml.loads(text).get("project") or {}).get("name")) or None
        if file == "setup.cfg":
            parser = configparser.ConfigParser(interpolation=None)
            parser.read_string(text)
            return parser.get("metadata", "name", fallback=None) or None
    except (tomllib.TOMLDecodeError, configparser.Error, AttributeError):
        return None
    names = set(_SETUP_NAME.findall(text))
    return names.pop() if len(names) == 1 else None


def check_builds_package(repo: Path, ref: str, package: str, given: str) -> None:
    """The repository's files at ``ref`` declare ``package`` (when they name one at all)."""
    found = package_at(repo, ref)
    if found and canonicalize_name(found[0]) != canonicalize_name(package):
        raise UsageError(f"the repository {given} builds {found[0]} ({found[1]} at {ref[:12]}), not {package}: "
                         f"give --package {found[0]}, or the repository of {package}")
