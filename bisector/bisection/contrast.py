"""The job's ``[contrast]``: the same probe in another setting, measured at the two ends of the range
the answer came from, so the report can say how that setup sees the same versions (the seed: the
reporter's Trainer loop against accelerate's own loop, which a maintainer's script runs)."""
from __future__ import annotations

from typing import Any, Callable, Optional

from packaging.utils import canonicalize_name

from bisector.bisection.assemble import point_details
from bisector.decide.judge import Judgement, judge
from bisector.bisection.phase import PhaseResult
from bisector.bisection.plan import Plan
from bisector.bisection.recorder import RunRecorder
from bisector.decide.seam import MeasurerFactory, Measures
from bisector.job.config import ContrastSection, JobConfig
from bisector.core.candidate import Candidate
from bisector.core.criterion import Calibrated
from bisector.core.result import Contrast
from bisector.core.points import Point

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


def reference_of(config: JobConfig) -> Optional[dict[str, Any]]:
    """The upstream report's numbers (``[reference]``) when the job bisects the report's package."""
    ref = config.reference
    if ref is not None and ref.package == canonicalize_name(config.job.package):
        return ref.model_dump(mode="json")
    return None


def contrast_of(config: JobConfig, recorder: RunRecorder, measurers: MeasurerFactory, plan: Plan,
                phase: PhaseResult) -> Optional[Contrast]:
    """The job's ``[contrast]`` measured at the two ends of ``plan`` (None when there is none, for an
    exit-code probe, or when it is the job's own setting)."""
    section = config.contrast
    if section is None or config.probe.judged_by_exit_code or is_the_jobs_own(section, config.probe.args):
        return None
    args = [*config.probe.args, *section.args]   # the job's setting, with the contrast's changes
    measurer = recorder.measurer(measurers.with_probe_args(args), plan.repo_path)
    return measure_contrast(section, measurer, phase.calibrated, [plan.candidates[0], plan.candidates[-1]],
                            recorder.step)
