"""The answer of torch's nightly level in commits: the commit each boundary build was made from (its
``torch.version.git_version``, recorded with its measurements), the compare view between the two on the
repository torch's metadata names, and the count of commits between them when a clone is at hand
(``--repo``: a partial clone holds the history this needs)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from bisector.bisection.phase import PhaseResult
from bisector.core.candidate import CandidateKind
from bisector.core.result import CommitRange
from bisector.errors import BisectorError
from bisector.job.config import JobSection
from bisector.redact import redact_url
from bisector.sources import git


def built_from(phase: PhaseResult, index: int) -> Optional[str]:
    """The commit candidate ``index``'s torch was built from, as its measurements recorded it."""
    for m in phase.judgements[index].measurements if index in phase.judgements else []:
        if m.env and m.env.torch_git:
            return m.env.torch_git
    return None


def _count(job: JobSection, older: str, newer: str, cache_dir: Optional[Path]) -> tuple[Optional[int], Optional[str]]:
    if not job.repo:
        return None, "give --repo (a clone of torch's repository; a partial clone will do) to count them"
    try:
        path = git.open_repo(job.repo, cache_dir or Path.cwd())
    except BisectorError as exc:
        return None, f"--repo {redact_url(job.repo)}: {exc}"
    count = git.count_between(path, older, newer)
    if count is None:
        return None, f"the clone at --repo {redact_url(job.repo)} lacks {older[:10]} or {newer[:10]} (fetch it)"
    return count, None


def commit_range(job: JobSection, phase: PhaseResult, repo_url: Optional[str],
                 cache_dir: Optional[Path]) -> Optional[CommitRange]:
    """The commits between the last good and first bad of a nightly phase (None when neither is a nightly)."""
    s = phase.search
    if s.last_good is None or s.first_bad is None:
        return None
    older, newer = sorted((s.last_good, s.first_bad))
    if CandidateKind.NIGHTLY not in (phase.candidates[older].kind, phase.candidates[newer].kind):
        return None
    a, b = built_from(phase, older), built_from(phase, newer)
    out = CommitRange(index_url=redact_url(job.nightly_index) if job.nightly_index else None, older=a, newer=b)
    if not a or not b:
        out.why_no_count = "the builds did not say which commits they were made from (torch.version.git_version)"
        return out
    out.link = f"{repo_url.rstrip('/')}/compare/{a}...{b}" if repo_url else None
    out.commits, out.why_no_count = _count(job, a, b, cache_dir)
    return out
