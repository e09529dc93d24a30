"""Turn a job into candidate lists: releases from the index, commits from a repository."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from bisector.job.config import JobSection
from bisector.core.candidate import Candidate
from bisector.envs import EnvSpec
from bisector.measure.gpus import Gpu
from bisector.errors import UsageError
from bisector.sources import git
from bisector.sources import index
from bisector.sources.installer_config import resolve_index_url

@dataclass
class Plan:
    """Candidates oldest first, plus notes to show the user (e.g. a merge-base substitution)."""

    candidates: list[Candidate]
    notes: list[str] = field(default_factory=list)
    repo_path: Optional[Path] = None
    repo_url: Optional[str] = None


@dataclass(frozen=True)
class JobPlan:
    """What a job resolves to before it runs (checked by preflight, then handed to the bisect): its
    environment spec and, for a release bisect, its release plan."""

    spec: EnvSpec
    releases: Optional[Plan] = None
    gpus: Optional[list[Gpu]] = None   # this machine's GPUs as preflight found them (the engine's, then)


def release_plan(job: JobSection) -> Plan:
    """Releases between good and bad (inclusive) from the configured index."""
    url = resolve_index_url(job.index_url)
    releases = index.list_releases(url, job.package)
    older, newer = (job.bad, job.good) if job.find_fix else (job.good, job.bad)
    if job.find_fix and index.find_release(releases, older).parsed > index.find_release(releases, newer).parsed:
        raise UsageError(fix_order(job))
    chosen = index.releases_between(releases, older, newer, pre=job.pre)
    return Plan([index.release_candidate(job.package, r) for r in chosen])


def commit_plan(job: JobSection, repo: str, cache_dir: Path, good: Optional[str] = None,
                bad: Optional[str] = None) -> Plan:
    """Commits from good to bad on the first-parent line (via their merge-base when good is on a branch)."""
    path = git.open_repo(repo, cache_dir)
    good_ref, bad_ref = good or job.good, bad or job.bad
    if job.find_fix:
        good_ref, bad_ref = bad_ref, good_ref
    older, newer = git.resolve(path, good_ref), git.resolve(path, bad_ref)
    if older == newer:
        raise UsageError(f"good and bad name the same commit ({older[:12]})")
    notes = []
    if not git.is_ancestor(path, older, newer):
        backwards = git.is_ancestor(path, newer, older) or git.committed_at(path, older) > git.committed_at(path, newer)
        if job.find_fix and backwards:
            raise UsageError(fix_order(job))
        if git.is_ancestor(path, newer, older):
            raise UsageError(f"good {good_ref} is newer than bad {bad_ref} (use --find-fix to search for a fix)")
        base = git.merge_base(path, older, newer)
        notes.append(f"{good_ref} is not an ancestor of {bad_ref}: bisecting from their merge-base {base[:12]}")
        older = base
    shas = git.first_parent_range(path, older, newer, first_parent=job.first_parent)
    if len(shas) < 2:
        raise UsageError(f"no commits between {good_ref} and {bad_ref}")
    url = _link_base(job, repo, path)
    return Plan(git.commit_candidates(path, job.package, shas, url), notes, path, url)


def fix_order(job: JobSection) -> str:
    """--find-fix with the two ends the wrong way round: --bad names the older, still broken side."""
    return (f"with --find-fix, --bad names the older side (still broken) and --good the newer one (fixed): "
            f"--bad {job.good} --good {job.bad}")


def _link_base(job: JobSection, repo: str, path: Path) -> Optional[str]:
    """Where commit/PR/compare links point: --repo-url, else the URL given, else the clone's origin."""
    if job.repo_url:
        return job.repo_url.rstrip("/")
    origin = git.origin_url(path) if not git.is_url(repo) else None
    return git.web_url(repo) or (git.web_url(origin) if origin else None)


def older_releases(job: JobSection) -> list[Candidate]:
    """Releases older than the good endpoint (same filters), oldest first: where --widen looks."""
    url = resolve_index_url(job.index_url)
    releases = index.list_releases(url, job.package)
    good = index.find_release(releases, job.good)
    return [index.release_candidate(job.package, r) for r in releases
            if r.parsed < good.parsed and (job.pre or r.usable)]
