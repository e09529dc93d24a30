"""Build a real git repository of a tiny pure-Python package whose memory use jumps at one commit."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.gitrepo import package_files

MODULE = '''"""A tiny package whose step() keeps a buffer alive; its size is the planted regression."""
BUFFER_KIB = {kib}


def step():
    buf = bytearray(BUFFER_KIB * 1024)
    return len(buf)
'''


def git(repo: Path, *args: str, date: str = "2024-01-01T00:00:00+00:00") -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_NAME": "Dev One",
           "GIT_AUTHOR_EMAIL": "dev@example.invalid", "GIT_COMMITTER_NAME": "Dev One",
           "GIT_COMMITTER_EMAIL": "dev@example.invalid"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def write_package(repo: Path, name: str, version: str, kib: int, source: str | None = None) -> None:
    """The package's files; it builds offline with the in-tree backend of tests.support.gitrepo."""
    for rel, text in package_files(name, version, module_source=source or MODULE.format(kib=kib)).items():
        target = repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def make_repo(root: Path, name: str = "tinypkg", commits: int = 30, bad_at: int | None = 17,
              good_kib: int = 100, bad_kib: int = 400, tags: dict[int, str] | None = None,
              slowdown: float = 1.0) -> tuple[Path, list[str]]:
    """Create ``commits`` commits; from index ``bad_at`` on (never when None), step() allocates
    ``bad_kib`` and the module's ``SLOWDOWN`` is ``slowdown`` (1.0 before; a timed probe reads it).

    Returns the repo path and the SHAs oldest first. Subjects carry PR numbers like real merges.
    """
    repo = root / name
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for i in range(commits):
        bad = bad_at is not None and i >= bad_at
        kib = bad_kib if bad else good_kib
        write_package(repo, name, f"0.1.{i}", kib, MODULE.format(kib=kib) + f"SLOWDOWN = {slowdown if bad else 1.0}\n")
        (repo / "CHANGES.txt").write_text(f"change {i}\n")
        date = f"2024-01-{1 + i % 28:02d}T{10 + i // 28:02d}:00:00+00:00"
        git(repo, "add", "-A", date=date)
        git(repo, "commit", "-q", "-m", f"Change number {i} (#{100 + i})", date=date)
        shas.append(git(repo, "rev-parse", "HEAD").strip())
        if tags and i in tags:
            git(repo, "tag", tags[i], date=date)
    return repo, shas
