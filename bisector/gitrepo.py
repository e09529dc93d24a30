"""Commit candidates from a git repository: validated refs, first-parent ranges, commit facts, links."""
from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import subprocess
from pathlib import Path
from typing import Optional

from .candidate import Candidate, CandidateKind
from .errors import BisectorError, UsageError
from .redact import redact_text, redact_url

_PR = re.compile(r"\(#(\d+)\)|Merge pull request #(\d+)")
_SEP = "\x1f"


def _git(args: list[str], cwd: Optional[Path] = None, timeout: float = 600) -> str:
    """Run git with an argument list (never a shell); a failure is one clear line."""
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "GIT_TERMINAL_PROMPT": "0"}, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BisectorError(f"git {args[0]} failed: {exc}") from None
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        detail = redact_text(lines[-1]) if lines else f"exit {proc.returncode}"
        raise BisectorError(f"git {args[0]} failed: {detail}")
    return proc.stdout


def validate_ref(ref: str) -> str:
    """Refuse refs that could be read as options or are not valid git ref names."""
    if not ref or ref.startswith("-") or any(c.isspace() or ord(c) < 32 for c in ref):
        raise UsageError(f"invalid git ref {ref!r}")
    if re.fullmatch(r"[0-9a-fA-F]{4,40}", ref):
        return ref
    proc = subprocess.run(["git", "check-ref-format", "--allow-onelevel", ref], capture_output=True)
    if proc.returncode != 0 or any(c in ref for c in ";|&$`<>\\'\""):
        raise UsageError(f"invalid git ref {ref!r}")
    return ref


def is_url(repo: str) -> bool:
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", repo)) or bool(re.match(r"^[\w.-]+@[\w.-]+:", repo))


def open_repo(repo: str, cache_dir: Path) -> Path:
    """A local repository path, or a URL cloned once into the cache and fetched afterwards."""
    if repo.startswith("-"):
        raise UsageError(f"invalid repository {repo!r}")
    if not is_url(repo):
        path = Path(repo).expanduser().resolve()
        if not (path / ".git").exists() and not (path / "HEAD").exists():
            raise UsageError(f"repository {repo} not found (no git repository at {path})")
        return path
    key = hashlib.sha256(repo.encode()).hexdigest()[:16]
    target = cache_dir / "repos" / key
    if (target / "HEAD").exists():
        _git(["fetch", "--quiet", "--tags", "--force", "origin"], cwd=target)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            _git(["clone", "--quiet", "--bare", "--", repo, str(target)])
        except BisectorError as exc:
            raise BisectorError(f"cannot clone {redact_url(repo)}: {exc}") from None
        _git(["config", "remote.origin.fetch", "+refs/heads/*:refs/heads/*"], cwd=target)
    return target


def resolve(repo: Path, ref: str) -> str:
    """The full SHA a ref names, or a usage error naming the unknown ref."""
    validate_ref(ref)
    try:
        return _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], cwd=repo).strip()
    except BisectorError:
        raise UsageError(f"unknown ref '{ref}' in {repo}") from None


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    proc = subprocess.run(["git", "merge-base", "--is-ancestor", older, newer], cwd=repo, capture_output=True)
    return proc.returncode == 0


def merge_base(repo: Path, a: str, b: str) -> str:
    return _git(["merge-base", a, b], cwd=repo).strip()


def first_parent_range(repo: Path, good_sha: str, bad_sha: str, first_parent: bool = True) -> list[str]:
    """SHAs from good to bad inclusive, oldest first, along the first-parent line by default."""
    args = ["rev-list", "--reverse"]
    if first_parent:
        args.append("--first-parent")
    shas = _git([*args, f"{good_sha}..{bad_sha}"], cwd=repo).split()
    return [good_sha, *shas]


def commit_candidates(repo: Path, package: str, shas: list[str], repo_url: Optional[str]) -> list[Candidate]:
    """Commit facts (subject, author, committer date, PR number) for each SHA."""
    fmt = _SEP.join(["%H", "%cI", "%an", "%s"])
    out = _git(["show", "--no-patch", f"--format={fmt}", *shas], cwd=repo) if shas else ""
    facts = {}
    for line in out.splitlines():
        parts = line.split(_SEP, 3)
        if len(parts) == 4:
            facts[parts[0]] = parts
    result = []
    for sha in shas:
        _, date, author, subject = facts[sha]
        match = _PR.search(subject)
        pr = int(next(g for g in match.groups() if g)) if match else None
        result.append(Candidate(package=package, kind=CandidateKind.COMMIT, ref=sha,
                                date=dt.datetime.fromisoformat(date), subject=subject,
                                author=author, pr=pr, repo_url=repo_url))
    return result


def web_url(repo: str) -> Optional[str]:
    """A browsable https URL for a remote repository (for commit/compare/PR links), credentials removed."""
    if not is_url(repo):
        return None
    url = redact_url(repo)
    ssh = re.match(r"^[\w.-]+@([\w.-]+):(.+)$", repo)
    if ssh:
        url = f"https://{ssh.group(1)}/{ssh.group(2)}"
    url = url.replace("***@", "")
    return re.sub(r"\.git/?$", "", url.rstrip("/"))


def origin_url(repo: Path) -> Optional[str]:
    """The ``origin`` remote of a local repository, if it has one."""
    proc = subprocess.run(["git", "config", "--get", "remote.origin.url"], cwd=repo, capture_output=True, text=True)
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def tag_for_version(repo: Path, version: str) -> Optional[str]:
    """The tag naming a release (``v0.22.0``, ``0.22.0``, ``v0.22``), if the repository has one."""
    tags = set(_git(["tag", "--list"], cwd=repo).split())
    short = version[:-2] if version.endswith(".0") else version
    for name in (f"v{version}", version, f"v{short}", short):
        if name in tags:
            return name
    return None
