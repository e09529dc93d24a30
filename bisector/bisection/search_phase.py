"""One search phase of a bisect as the run sets it up: its measurer (counted by the run's recorder),
how many probes at once, whether to prefetch or speculate, threshold or stats mode."""
from __future__ import annotations

import os

from bisector.bisection.phase import Phase, PhaseResult
from bisector.bisection.plan import Plan
from bisector.bisection.recorder import RunRecorder
from bisector.decide.seam import MeasurerFactory
from bisector.bisection.stats_phase import StatsPhase
from bisector.core.criterion import Compare
from bisector.errors import UsageError


def search_phase(name: str, plan: Plan, measurers: MeasurerFactory, recorder: RunRecorder) -> PhaseResult:
    """Search ``plan``'s candidates; every judgement becomes a step of ``recorder``'s run."""
    if len(plan.candidates) < 2:
        raise UsageError("need at least two candidates to bisect")
    for text in plan.notes:
        recorder.note(text)
    recorder.handler.plan(name, plan.candidates)
    measurer = recorder.measurer(measurers, plan.repo_path)
    config = recorder.config
    run, criterion = config.run, config.criterion
    jobs = max(1, min(run.jobs, measurers.slots))
    # default: prefetch when a core is left over beyond the probes running at once, or (Ray) always:
    # there spare slots measure the likely next midpoints
    speculates = measurers.speculates
    prefetch = run.prefetch if run.prefetch is not None else ((os.cpu_count() or 1) > jobs or speculates)
    kind = StatsPhase if criterion.compare is Compare.STATS else Phase
    phase = kind(name, plan.candidates, measurer, criterion, recorder.step, jobs=jobs, prefetch=prefetch,
                 find_fix=config.job.find_fix, confirm=criterion.should_confirm,
                 slots=measurers.slots if speculates and prefetch else 0, on_note=recorder.note)
    return phase.run()
