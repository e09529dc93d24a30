"""Follow-ups: the bisect of one package between two versions that a finding points to, built in
one place (:func:`follow_job`) for a bisect's attributed companion and a diff's package culprit.

--follow: when a companion explains the step, bisect that companion between its two versions.

The followed job keeps everything of the first one (probe, criterion, env spec, pins) and sets the
context the attribution measured: the package started from pinned at its first bad release, every
other moved package at its first-bad version, and the companion bisected from its last-good to its
first-bad version (releases, then its commits in auto mode when its repository is known: --follow-repo,
or the one its metadata names). The followed bisect does not follow again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from packaging.utils import canonicalize_name

from bisector.job.commandline import with_words
from bisector.job.config import JobConfig, Mode
from bisector.core.changes import Attribution, AttributionKind, ChangeKind
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.requirements import Pin

_DROPPED = {"--repo": True, "--repo-url": True, "--follow-repo": True, "--follow": False, "--no-follow": False,
            "--resume": False, "--widen": False}


@dataclass(frozen=True)
class FollowUp:
    """A companion's bisect to run: its job, the measurers of its context (the pins added) and its
    command line."""

    config: JobConfig
    measurers: Any          # a bisection.seam.MeasurerFactory
    command: list[str]



def should_follow(config: JobConfig, attribution: Optional[Attribution]) -> bool:
    """Follow a companion unless --no-follow (on by default when the cause is a companion)."""
    return (attribution is not None and attribution.kind is AttributionKind.COMPANION
            and config.job.follow is not False)


def follow_pins(attribution: Attribution, first_bad: Candidate, pins: list[Pin]) -> Optional[list[Pin]]:
    """The followed job's pins, or None when that context cannot be pinned (a commit candidate, or a
    companion absent on one side)."""
    companion = attribution.minimal[0]
    if first_bad.kind is CandidateKind.COMMIT or companion.a is None or companion.b is None:
        return None
    own = canonicalize_name(companion.name)
    kept = [p for p in pins if canonicalize_name(p.name) != own]
    moved = [Pin(c.name, c.b) for c in attribution.changes
             if c.kind is ChangeKind.PACKAGE and c.name != companion.name and c.b is not None]
    return kept + [Pin(first_bad.package, first_bad.ref)] + moved


def follow_job(base: JobConfig, package: str, good: str, bad: str, pins: list[Pin], mode: Mode,
               find_fix: bool = False) -> JobConfig:
    """The one builder of a follow-up bisect: ``base``'s probe, criterion, env spec, index and run
    settings, bisecting ``package`` from ``good`` to ``bad`` with ``pins`` over the spec, in its own
    repository when ``base`` names one (``follow_repo``); it does not follow, widen or re-aim again."""
    job = base.job
    update = {"package": canonicalize_name(package), "good": good, "bad": bad, "mode": mode, "find_fix": find_fix,
              "repo": job.follow_repo, "repo_url": None, "follow_repo": None, "pins": pins, "follow": False,
              "widen": False}
    return base.model_copy(update={"job": job.model_copy(update=update)})


def follow_config(config: JobConfig, attribution: Attribution, first_bad: Candidate) -> Optional[JobConfig]:
    """The bisect of the attributed companion (see the module), or None when it cannot be pinned."""
    job, companion = config.job, attribution.minimal[0]
    pins = follow_pins(attribution, first_bad, job.pins)
    if pins is None:
        return None
    mode = Mode.AUTO if job.mode in (Mode.COMMITS, Mode.NIGHTLIES) else job.mode
    return follow_job(config, companion.name, companion.a, companion.b, pins, mode)


def follow_command(command: list[str], followed: JobConfig, added: list[Pin]) -> list[str]:
    """The command line of the followed bisect (the first one's, re-aimed), as words."""
    job = followed.job
    words = with_words(command, {"--package": job.package, "--good": job.good, "--bad": job.bad,
                                 "--mode": job.mode.value}, drop=_DROPPED)
    if job.repo:
        words += ["--repo", job.repo]
    for pin in added:
        words += ["--with", str(pin)]
    return words
