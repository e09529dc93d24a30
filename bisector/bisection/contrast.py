"""The job's ``[contrast]``: the same probe in another setting, measured at the two ends of the range
the answer came from, so the report can say how that setup sees the same versions (the seed: the
reporter's Trainer loop against accelerate's own loop, which a maintainer's script runs)."""
from __future__ import annotations

from typing import Callable

from bisector.bisection.assemble import point_details
from bisector.bisection.judge import Judgement, judge
from bisector.bisection.seam import Measures
from bisector.config import ContrastSection
from bisector.core.candidate import Candidate
from bisector.core.criterion import Calibrated
from bisector.core.result import Contrast, Point

PHASE = "contrast"


def _last_values(args: list[str]) -> dict[str, str]:
    """{'--loop': 'accelerate'} from ['--loop=trainer', '--loop=accelerate']: what each flag ends up as."""
    out = {}
    for arg in args:
        name, sep, value = arg.partition("=")
        if sep and name.startswith("-"):
            out[name] = value
    return out


def is_the_jobs_own(section: ContrastSection, job_args: list[str]) -> bool:
    """The contrast changes nothing the job's own arguments do not already say (a job run in the
    contrast's setting): measuring it again would only repeat the job."""
    mine, theirs = _last_values(job_args), _last_values(section.args)
    return bool(theirs) and all(mine.get(k) == v for k, v in theirs.items()) and len(theirs) == len(section.args)


def measure_contrast(section: ContrastSection, measurer: Measures, calibrated: Calibrated,
                     ends: list[Candidate], on_step: Callable[[str, Candidate, Judgement], None]) -> Contrast:
    """Judge each end with the contrast's probe by the run's criterion (stored, and logged as steps)."""
    points = []
    for c in ends:
        j = judge(measurer, calibrated, c)
        on_step(PHASE, c, j)
        point = Point.of(c, j.value, j.metrics)
        point.details = point_details(j.measurements)
        points.append(point)
    return Contrast(label=section.label, args=list(section.args), points=points)
