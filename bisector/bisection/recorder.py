"""The record of one bisect run: every step the moment it is judged (the store's step log and the
handler), the notes, the run row, and what its measurers did (probes run, measurements reused).

The driver, its phases and its follow-ups all record through one :class:`RunRecorder`; the run-level
parts of the result (steps, log, notes, counts) are filled from it once, when the run ends.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Protocol

from bisector.redact import mask_words
from bisector.decide.judge import Judgement, judge, refuse_bad_input
from bisector.bisection.phase import flipped
from bisector.decide.seam import MeasurerFactory, Measures
from bisector.job.config import JobConfig
from bisector.core.candidate import Candidate
from bisector.core.criterion import Calibrated
from bisector.core.measurement import Status, absent_reason
from bisector.core.points import Step
from bisector.measure.program_output import failure_lines
from bisector.errors import UsageError
from bisector.store.run_record import RunRecord, config_hash
from bisector.store.storage import RunKind, StepRow, Store


@dataclass(frozen=True)
class RunSummary:
    """The run-level record of a run: its steps, notes and what its measurers did (probes run, measurements
    reused), as the result records them."""

    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    probes_run: int = 0
    measurements_reused: int = 0


class Handler(Protocol):
    """Observes a bisect (the CLI prints; a library user may collect)."""

    def note(self, text: str) -> None: ...
    def plan(self, phase: str, candidates: list[Candidate]) -> None: ...
    def step(self, step: Step) -> None: ...
    # optional (a handler written before it lacks it): the last lines a failed step's run printed
    # def failed_output(self, step: Step, lines: list[str]) -> None: ...


def _failed(m) -> bool:
    """A run that ended in failure (its output says why), not one that measured or answered by exit code."""
    return m.status not in (Status.OK, Status.EXIT_CODE) or (m.status is Status.EXIT_CODE and m.exit_code != 0)


class SilentHandler:
    """A handler that ignores everything (the library default)."""

    def note(self, text: str) -> None:
        pass

    def plan(self, phase: str, candidates: list[Candidate]) -> None:
        pass

    def step(self, step: Step) -> None:
        pass


class RunRecorder:
    """Records one run of ``config`` in ``store`` (see the module); ``run_id``: a stopped run continued
    under its own id (else a new one)."""

    def __init__(self, config: JobConfig, store: Store, run_id: Optional[str], command: list[str],
                 handler: Optional[Handler] = None):
        self.config, self.store = config, store
        self.command = mask_words(command)   # what is stored and offered never holds a secret (the config runs)
        self.record = RunRecord(store, RunKind.BISECT, command, config.model_dump(mode="json"), config_hash(config),
                                run_id)
        self.run_id = self.record.run_id
        self.handler = handler or SilentHandler()
        self.steps: list[Step] = []
        self.notes: list[str] = []
        self._measurers: list[Measures] = []
        self._metric_seen = False

    # -- the run row ----------------------------------------------------------------------------
    def begin(self) -> None:
        """A new attempt of the run: its earlier step log goes (the measurements stay stored)."""
        self.steps, self.notes, self._measurers, self._metric_seen = [], [], [], False
        self.record.begin()
        self.run_id = self.record.run_id   # (a stopped run another process took up first: a run of its own)

    def save(self, status: str, result: Optional[dict] = None) -> None:
        self.record.save(status, result)

    def forget(self) -> None:
        """A run rejected before its first step leaves no run to list or resume."""
        self.record.forget()

    # -- measuring and steps --------------------------------------------------------------------
    def measurer(self, factory: MeasurerFactory, repo_path: Optional[Path] = None) -> Measures:
        """A phase's measurer from ``factory``, counted in this run."""
        measurer = factory(self.run_id, repo_path)
        self._measurers.append(measurer)
        return measurer

    @property
    def reused_keys(self) -> set[str]:
        """Measurements this run took from the store instead of probing."""
        return set().union(*(m.reused_keys for m in self._measurers))

    @property
    def probes_run(self) -> int:
        return sum(m.probes_run for m in self._measurers)

    def step(self, phase: str, c: Candidate, j: Judgement, label: Optional[str] = None) -> Step:
        """Record ``j`` as the next step: stored, shown, kept."""
        self._check_metric(j)
        step = Step(seq=len(self.steps), phase=phase, candidate=label or c.short, date=c.date, verdict=j.verdict,
                    value=j.value, metric=self.config.criterion.metric, metrics=j.metrics,
                    repeats=len(j.measurements), seconds=round(j.seconds, 3), reason=j.reason,
                    reused=all(m.reused for m in j.measurements))
        self.steps.append(step)
        stored = c.ref + (f"-revert-{c.revert}" if c.revert else "")   # a revert is not its bad end
        self.record.step(StepRow(run_id=self.run_id, seq=step.seq, candidate=f"{phase} {stored}",
                                    verdict=step.verdict, value=step.value, reason=step.reason,
                                    seconds=step.seconds, measurements=[m.key for m in j.measurements]))
        self.handler.step(step)
        lines = failure_lines(j.measurements[-1].details) if j.measurements and _failed(j.measurements[-1]) else []
        shown = getattr(self.handler, "failed_output", None)
        if lines and shown is not None:
            shown(step, lines)
        return step

    def judged(self, phase: str, measurer: Measures, c: Candidate, calibrated: Calibrated,
               label: Optional[str] = None) -> tuple[Judgement, Step]:
        """Judge ``c`` with ``measurer`` (flipped for --find-fix) and record it: a follow-up's trial."""
        j = judge(measurer, calibrated, c)
        if self.config.job.find_fix:
            j.verdict = flipped(j.verdict)
        return j, self.step(phase, c, j, label)

    def note(self, text: str) -> None:
        """A note for the user and the result."""
        self.notes.append(text)
        self.handler.note(text)

    def _check_metric(self, j: Judgement) -> None:
        """The criterion's metric missing from a clean probe result (every cell measured) is a
        typo, not a SKIP: stop at the first such measurement and list what the probe produces. A probe
        that says why it left the metric out (the command meter: no optimizer step) is a SKIP with that
        reason; a command's ``--measure-skip`` beyond the steps it took is bad input (exit 2)."""
        metric = self.config.criterion.metric
        if not metric or self._metric_seen:
            return
        clean = [m for m in j.measurements if m.status is Status.OK and m.metrics and not
                 (m.result and m.result.cell_errors)]
        if any(metric in m.metrics for m in clean):
            self._metric_seen = True
            return
        refuse_bad_input(self.config.probe.bad_input, clean)
        if clean and not absent_reason(clean, metric):
            produced = sorted(clean[-1].metrics)
            shown = ", ".join(produced[:12]) + (f" (and {len(produced) - 12} more)" if len(produced) > 12 else "")
            raise UsageError(f"metric {metric!r} is not produced by the probe; it produces: {shown}")

    # -- the result's run-level part --------------------------------------------------------------
    def summary(self) -> RunSummary:
        """This run's steps, notes and counts, as the result records them."""
        return RunSummary(steps=list(self.steps), notes=list(self.notes), probes_run=self.probes_run,
                          measurements_reused=len(self.reused_keys))
