"""The one git layer: validated refs, clones, first-parent ranges, commit facts, links, archives.

Repositories are GitPython ``Repo`` objects whose every git command runs through
:func:`bisector.process.procs.run_bounded`: an argument list (never a shell), its own process group, a time
limit, and on Ctrl-C / SIGTERM the same SIGINT -> SIGTERM -> SIGKILL escalation as a probe. Reads that
GitPython does in Python (config, tags) start no process. A failed command is one clear line
(:class:`GitFailure`), credentials redacted.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
from pathlib import Path
from typing import Any, Optional

_REFRESH = os.environ.get("GIT_PYTHON_REFRESH")
os.environ["GIT_PYTHON_REFRESH"] = "quiet"   # without git on PATH, importing GitPython must not fail every command
import git as gitpython  # noqa: E402
if _REFRESH is None:
    del os.environ["GIT_PYTHON_REFRESH"]
else:
    os.environ["GIT_PYTHON_REFRESH"] = _REFRESH

from bisector.console import activity
from bisector.core.candidate import Candidate, CandidateKind
from bisector.errors import BisectorError, UsageError
from bisector.process.procs import run_bounded
from bisector.redact import redact_text, redact_url

TIMEOUT_S = 600
CLONE_TIMEOUT_S = 3600   # a first clone of a large repository
_PR = re.compile(r"\(#(\d+)\)|Merge pull request #(\d+)")
_SEP = "\x1f"
_SHELL_CHARS = ";|&$`<>\\'\""
GIT_REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                 "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE")


class GitFailure(BisectorError):
    """A git command failed: ``command`` is git's subcommand, ``reason`` its last line, redacted."""

    def __init__(self, command: str, reason: str):
        super().__init__(f"git {command} failed: {reason}")
        self.command, self.reason = command, reason


class _CommandError(gitpython.GitCommandError):
    """GitPython's command error, keeping git's own output undecorated."""

    def __init__(self, argv: list[str], status: int, stderr: str, stdout: str):
        super().__init__(argv, status, stderr, stdout)
        self.argv, self.raw_stderr, self.raw_stdout = argv, stderr, stdout


class _BoundedGit(gitpython.Git):
    """GitPython's command runner with every command run through bisector.process.procs (see the module)."""

    def execute(self, command: Any, *, with_extended_output: bool = False, with_exceptions: bool = True,
                as_process: bool = False, kill_after_timeout: Optional[float] = None,
                strip_newline_in_stdout: bool = True, env: Optional[dict] = None, **_: Any) -> Any:
        if as_process:  # streaming would bypass procs; nothing here needs it
            raise NotImplementedError("bisector reads git's output whole")
        argv = [str(a) for a in command]
        done = run_bounded(argv, {**_environment(), **(env or {}), "GIT_TERMINAL_PROMPT": "0"},
                           cwd=Path(self._working_dir) if self._working_dir else None,
                           timeout=kill_after_timeout or TIMEOUT_S, limit=None, on_line=activity.line_updater())
        out, err = done.stdout_tail, done.stderr_tail.rstrip("\n")
        if strip_newline_in_stdout:
            out = out.removesuffix("\n")
        status = done.returncode
        if with_exceptions and (done.timed_out or status != 0):
            why = f"timed out after {kill_after_timeout or TIMEOUT_S:.0f}s" if done.timed_out else err
            raise _CommandError(argv, status, why, out)
        return (status, out, err) if with_extended_output else out


def _environment() -> dict[str, str]:
    """os.environ without what would point git at another repository, index or object store
    (bisector.sources.repo_checks refuses a run that has them set; other git calls just drop them)."""
    return {k: v for k, v in os.environ.items() if k not in GIT_REDIRECTS}


class _Repo(gitpython.Repo):
    GitCommandWrapperType = _BoundedGit


def _failure(exc: _CommandError) -> GitFailure:
    lines = (exc.raw_stderr or exc.raw_stdout).strip().splitlines()
    detail = redact_text(lines[-1]) if lines else f"exit {exc.status}"
    return GitFailure(exc.argv[1] if len(exc.argv) > 1 else "", detail)


def run_git(where: Any, *args: str, timeout: float = TIMEOUT_S, env: Optional[dict] = None) -> str:
    """``git <args>`` through ``where`` (a repository or a bare runner); GitFailure on failure."""
    runner = where.git if isinstance(where, gitpython.Repo) else where
    try:
        return runner.execute(["git", *args], kill_after_timeout=timeout, strip_newline_in_stdout=False, env=env)
    except _CommandError as exc:
        raise _failure(exc) from None
    except FileNotFoundError:
        raise GitFailure(args[0], "git is not installed") from None


def repository(path: Path) -> gitpython.Repo:
    """The GitPython repository at ``path`` (its commands bounded as above)."""
    try:
        repo = _Repo(path)
    except (gitpython.InvalidGitRepositoryError, gitpython.NoSuchPathError):
        raise BisectorError(f"no git repository at {path}") from None
    if not (Path(path) / ".git").exists() and (Path(path) / "HEAD").exists():
        repo.git._working_dir = str(path)  # a bare repository: git runs in it (GitPython may pick its parent)
    return repo


def validate_ref(ref: str) -> str:
    """Refuse refs that could be read as options or are not valid git ref names."""
    if not ref or ref.startswith("-") or any(c.isspace() or ord(c) < 32 for c in ref):
        raise UsageError(f"invalid git ref {ref!r}")
    if re.fullmatch(r"[0-9a-fA-F]{4,40}", ref):
        return ref
    try:
        run_git(_BoundedGit(), "check-ref-format", "--allow-onelevel", ref)
    except GitFailure:
        raise UsageError(f"invalid git ref {ref!r}") from None
    if any(c in ref for c in _SHELL_CHARS):
        raise UsageError(f"invalid git ref {ref!r}")
    return ref


def is_url(repo: str) -> bool:
    """Whether ``repo`` names a remote (scheme://... or user@host:path) rather than a local path."""
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", repo)) or bool(re.match(r"^[\w.-]+@[\w.-]+:", repo))


def local_repo(repo: str) -> Path:
    """The path of a local repository (its top directory, or a bare repository)."""
    if repo.startswith("-"):
        raise UsageError(f"invalid repository {repo!r}")
    path = Path(repo).expanduser().resolve()
    if not (path / ".git").exists() and not (path / "HEAD").exists():
        raise UsageError(f"repository {repo} not found (no git repository at {path})")
    return path


def open_repo(repo: str, cache_dir: Path) -> Path:
    """A local repository path, or a URL cloned once into the cache and fetched afterwards."""
    if not is_url(repo):
        return local_repo(repo)
    target = cache_dir / "repos" / hashlib.sha256(repo.encode()).hexdigest()[:16]
    if (target / "HEAD").exists():
        run_git(repository(target), "fetch", "--quiet", "--tags", "--force", "origin")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    try:  # a partial clone: history now, file contents only for the commits that get built
        with activity.doing(f"cloning {redact_url(repo)}", kind="clone"):
            run_git(_BoundedGit(), "clone", "--progress", "--bare", "--filter=blob:none", "--", repo, str(target),
                 timeout=CLONE_TIMEOUT_S)
    except GitFailure as exc:
        raise BisectorError(f"cannot clone {redact_url(repo)}: {exc}") from None
    run_git(repository(target), "config", "remote.origin.fetch", "+refs/heads/*:refs/heads/*")
    return target


def resolve(repo: Path, ref: str) -> str:
    """The full SHA a ref names (a release's version names its tag: 0.27.2 is v0.27.2), or a usage error
    naming the unknown ref."""
    validate_ref(ref)
    found = _commit_of(repo, ref)
    if found is None:
        tag = tag_for_version(repo, ref)
        found = _commit_of(repo, tag) if tag else None
    if found is None:
        raise UsageError(f"unknown ref '{ref}' in {repo}")
    return found


def _commit_of(repo: Path, ref: str) -> Optional[str]:
    try:
        return run_git(repository(repo), "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}").strip()
    except GitFailure:
        return None


def work_tree_top(path: Path) -> Optional[Path]:
    """The top directory of the git work tree ``path`` lies in (None: in none, or a bare repository)."""
    try:
        return Path(run_git(_BoundedGit(working_dir=str(path)), "rev-parse", "--show-toplevel").strip())
    except GitFailure:
        return None


def show_file(repo: Path, ref: str, name: str) -> Optional[str]:
    """The text of file ``name`` at ``ref`` (None when it has none)."""
    try:
        return run_git(repository(repo), "show", f"{ref}:{name}")
    except GitFailure:
        return None


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    """Whether commit ``older`` is an ancestor of ``newer`` (both full SHAs)."""
    try:
        return repository(repo).is_ancestor(older, newer)
    except _CommandError:
        return False


def committed_at(repo: Path, sha: str) -> int:
    """A commit's committer time (Unix seconds)."""
    return int(run_git(repository(repo), "show", "-s", "--format=%ct", sha).strip())


def merge_base(repo: Path, a: str, b: str) -> str:
    """The merge-base of two commits; a usage error when they share no history."""
    try:
        return run_git(repository(repo), "merge-base", a, b).strip()
    except GitFailure:
        raise UsageError(f"{a[:12]} and {b[:12]} share no history in {repo} (no merge-base)") from None


def first_parent_range(repo: Path, good_sha: str, bad_sha: str, first_parent: bool = True) -> list[str]:
    """SHAs from good to bad inclusive, oldest first, along the first-parent line by default."""
    args = ["rev-list", "--reverse", *(["--first-parent"] if first_parent else []), f"{good_sha}..{bad_sha}"]
    return [good_sha, *run_git(repository(repo), *args).split()]


def count_between(repo: Path, older: str, newer: str) -> Optional[int]:
    """``git rev-list --count older..newer``: the commits ``newer`` has that ``older`` has not (hex SHAs);
    None when the repository lacks either (a partial clone holds what this needs)."""
    if not all(re.fullmatch(r"[0-9a-f]{7,40}", sha) for sha in (older, newer)):
        return None
    try:
        return int(run_git(repository(repo), "rev-list", "--count", f"{older}..{newer}").strip())
    except (GitFailure, ValueError):
        return None


def commit_candidates(repo: Path, package: str, shas: list[str], repo_url: Optional[str]) -> list[Candidate]:
    """Commit facts (subject, author, committer date, PR number) for each SHA."""
    fmt = _SEP.join(["%H", "%cI", "%an", "%s"])
    out = run_git(repository(repo), "show", "--no-patch", f"--format={fmt}", *shas) if shas else ""
    facts = {parts[0]: parts for line in out.splitlines() if len(parts := line.split(_SEP, 3)) == 4}
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
    """The ``origin`` remote of a local repository, if it has one (read from its config)."""
    reader = repository(repo).config_reader()
    return str(reader.get_value('remote "origin"', "url", default="")).strip() or None


def tag_for_version(repo: Path, version: str) -> Optional[str]:
    """The tag naming a release (``v0.22.0``, ``0.22.0``, ``v0.22``), if the repository has one."""
    tags = {tag.name for tag in repository(repo).tags}
    short = version[:-2] if version.endswith(".0") else version
    return next((name for name in (f"v{version}", version, f"v{short}", short) if name in tags), None)
