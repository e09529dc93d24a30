"""When a diff's minimal difference is one package, the bisect of that package between its two
versions, in the setup the trials started from: the package under test pinned at the diff's version,
the starting side's other pins and probe arguments, the diff's threshold with its direction set so
that the older version's side is the good one (for an exit-code probe, --find-fix when the older
version is the bad one)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from packaging.version import Version

from bisector.bisection.follow_up import follow_job
from bisector.job.config import JobConfig, JobSection, Mode, RunSection
from bisector.core.requirements import Pin
from bisector.core.changes import ChangeKind
from bisector.core.criterion import Direction
from bisector.core.verdict import Verdict
from bisector.difference.diff_model import DiffAnswer, DiffJob

_OTHER = {Direction.INCREASE: Direction.DECREASE, Direction.DECREASE: Direction.INCREASE}


def follow_config(job: DiffJob, result: DiffAnswer, cache_dir: Optional[Path] = None,
                  env_backend: Optional[str] = None) -> Optional[JobConfig]:
    """The bisect of the one package the diff found (None when the answer is not one package version)."""
    if len(result.minimal) != 1 or result.minimal[0].kind is not ChangeKind.PACKAGE:
        return None
    change = result.minimal[0]
    if change.a is None or change.b is None:
        return None
    older, newer = sorted((change.a, change.b), key=Version)
    older_end = result.trials[0 if older == change.a else 1]
    start = job.a if result.start == "A" else job.b
    pins = [Pin(n, v) for n, v in start.packages.items() if n != change.name] + [Pin(job.package, job.version)]
    crit, find_fix = job.criterion, False
    if crit.metric and result.threshold is not None:
        direction = crit.direction if older_end.verdict is Verdict.GOOD else _OTHER[crit.direction]
        crit = crit.model_copy(update={"auto": False, "max_increase": None, "threshold": result.threshold,
                                       "direction": direction})
    else:
        find_fix = older_end.verdict is Verdict.BAD
    good, bad = (newer, older) if find_fix else (older, newer)
    base = JobConfig(job=JobSection(package=job.package, good=good, bad=bad, env=job.env, index_url=job.index_url,
                                    follow_repo=job.follow_repo),
                     probe=job.probe.with_args(start.args, start.env), criterion=crit,
                     run=RunSection(cache_dir=cache_dir, env_backend=env_backend))
    return follow_job(base, change.name, good, bad, pins, Mode.AUTO if job.follow_repo else Mode.RELEASES, find_fix)
