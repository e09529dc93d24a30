"""Auto mode's second level: the commits between the adjacent last-good / first-bad releases, from
``--repo``, or from the repository the first bad release's metadata names (with ``--clone``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bisector.bisection.assemble import metadata_url
from bisector.bisection.phase import PhaseResult
from bisector.bisection.plan import Plan, commit_plan
from bisector.bisection.recorder import RunRecorder
from bisector.job.commandline import joined, with_words
from bisector.errors import BisectorError
from bisector.sources import git


@dataclass(frozen=True)
class Refinement:
    """The commit plan to bisect next, or (when there is none) the command that would refine it (words)."""

    commits: Optional[Plan] = None
    command: Optional[list[str]] = None


def refinement(recorder: RunRecorder, plan: Plan, res: PhaseResult, cache_dir: Path) -> Refinement:
    """The commits between the boundary releases of ``res`` (see the module), or how to get them."""
    job = recorder.config.job
    good, bad = plan.candidates[res.search.last_good].ref, plan.candidates[res.search.first_bad].ref
    named = None if job.repo else _metadata_repo(recorder, res)
    repo = job.repo or (named if job.clone else None)
    def refine(where: str) -> list[str]:
        """Auto mode from the two adjacent releases: it finds their tags in the repository (release versions
        are no git refs, so --mode commits with them would not run as printed); their measurements are reused."""
        return with_words(recorder.command, {"--mode": "auto", "--good": good, "--bad": bad, "--repo": where})

    if not repo:   # the URL the metadata names: --repo takes it as it is, so the line runs as printed
        command = refine(named or "<REPO>")
        where = (f"; {job.package}'s metadata names {named} (the command below clones it; --repo a clone of "
                 "your own, or --clone, does the same)" if named else "")
        recorder.note(f"no --repo given: the answer stops at releases{where}; refine with: {joined(command)}")
        return Refinement(command=command)
    try:
        path = git.open_repo(repo, cache_dir)
        tags = [git.tag_for_version(path, v) for v in (good, bad)]
        if None in tags:
            raise BisectorError(f"no tags for {good} / {bad} in {repo}")
        return Refinement(commits=commit_plan(job, repo, cache_dir, good=tags[0], bad=tags[1]))
    except BisectorError as exc:
        recorder.note(f"cannot refine to commits ({exc}); the release answer stands")
        return Refinement(command=refine(repo))


def _metadata_repo(recorder: RunRecorder, res: PhaseResult) -> Optional[str]:
    """The repository named in the first bad release's metadata (its environment is at hand)."""
    url = metadata_url(res, res.search.first_bad)
    if url and recorder.config.job.clone:
        recorder.note(f"repository from {recorder.config.job.package}'s metadata: {url}")
    return url
