"""Commit trees to build from, read with git and never from the working copy: a commit's tree as a tar, the
tree of a commit with a culprit's change reverted (in a scratch index), and ``git describe`` of a commit."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from bisector.sources.git import GitFailure, repository, run_git


def archive(source: Path, sha: str, tar_path: Path, tree: Optional[str] = None) -> None:
    """Write the tree of commit ``sha`` (or the git ``tree`` given, e.g. a reverted one) as a tar file, never
    the working copy; GitFailure if it is unknown."""
    repo = repository(source)
    run_git(repo, "cat-file", "-e", f"{sha}^{{commit}}")
    if tree is not None:
        run_git(repo, "cat-file", "-e", f"{tree}^{{tree}}")
    run_git(repo, "archive", "--format=tar", "-o", str(tar_path), tree or sha, timeout=1800)


def reverted_tree(source: Path, onto: str, culprit: str, scratch: Path) -> tuple[Optional[str], list[str]]:
    """The tree of commit ``onto`` with ``culprit``'s change (against its first parent) reverted, by a
    3-way apply of the inverse diff into a scratch index (the repository's own index and working copy
    are never touched): (tree SHA, []) when it applies cleanly, else (None, the conflicting files)."""
    repo = repository(source)
    patch, index = scratch / "revert.patch", scratch / "revert.index"
    run_git(repo, "diff", "--binary", "--full-index", f"--output={patch}", culprit, f"{culprit}^1", "--")
    env = {"GIT_INDEX_FILE": str(index)}
    run_git(repo, "read-tree", onto, env=env)
    if patch.stat().st_size:
        try:
            run_git(repo, "apply", "--cached", "--3way", "--whitespace=nowarn", str(patch), env=env)
        except GitFailure as exc:
            unmerged = run_git(repo, "ls-files", "--unmerged", env=env).splitlines()
            files = sorted({line.split("\t", 1)[1] for line in unmerged if "\t" in line})
            return None, files or [exc.reason]
    return run_git(repo, "write-tree", env=env).strip(), []


def describe(source: Path, sha: str) -> Optional[str]:
    """``git describe --tags --long`` of a commit over version-like tags (None without such a tag)."""
    try:
        return run_git(repository(source), "describe", "--tags", "--long", "--abbrev=12", "--match", "v[0-9]*",
                    "--match", "[0-9]*", sha).strip()
    except GitFailure:
        return None
