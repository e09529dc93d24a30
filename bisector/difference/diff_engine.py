"""The diff engine: measure both setups, expand a probe loop into its knobs when that reproduces it,
then ddmin (bisector.core.ddmin) over the changes until one minimal set is left that moves the starting
side to the other side of the criterion.

Every trial is a real environment (the package under test at its version, the setup's pins laid over
the env spec) and a probe run (the shared probe arguments, then the setup's), stored the moment it is
measured and recorded as a step of a run of kind ``diff``: the same command again resumes from the
store. Trials: both ends; for a loop, the check that the starting loop with all of the other loop's
knobs lands on the other side (from A first; from B when A's loop does not take them); then at most
2 * ceil(log2 n) for one change that matters among n, n * n + 3 * n in general.
"""
from __future__ import annotations

from typing import Callable, Optional

from bisector.decide.change_search import ChangeSearch, trial_of
from bisector.decide.judge import Judgement, judge
from bisector.core.changes import Change, ChangeKind, Trial
from bisector.core.candidate import Candidate
from bisector.core.criterion import Calibrated, calibrate, needs_endpoints
from bisector.core.ddmin import Subset, Trial as Outcome, single_bound, worst_bound
from bisector.core.measurement import Status, metric_value
from bisector.core.points import Step
from bisector.core.units import human_value
from bisector.core.verdict import Verdict
from bisector.difference.knobs import expand_loop
from bisector.difference.diff_model import DiffAnswer, DiffJob, DiffResult, DiffStatus, Followed, Setup
from bisector.difference.setups import changes_between, trial_label, trial_setup
from bisector.envs import EnvSpec
from bisector.measure.assembly import Engine
from bisector.measure.measurer import Measurer
from bisector.store.run_record import RunRecord
from bisector.store.storage import RunKind, RunState, StepRow


class Differ:
    """Runs one :class:`DiffJob` over ``candidate`` (the package under test's release), measuring in
    ``engine`` over ``spec`` and storing in the engine's store; each trial is reported to ``handler.step``."""

    def __init__(self, job: DiffJob, candidate: Candidate, spec: EnvSpec, engine: Engine,
                 handler=None, command: Optional[list[str]] = None, run_id: Optional[str] = None):
        self.job, self.candidate, self.spec, self.engine, self.store = job, candidate, spec, engine, engine.store
        self.handler, self.command = handler, command or ["bisector", "diff"]
        # every diff its own run (identical ones share job.config_hash); a stopped one continued keeps its id
        self.record = RunRecord(self.store, RunKind.DIFF, self.command, job.model_dump(mode="json"),
                                job.config_hash, run_id)
        self.run_id = self.record.run_id
        self.trials: list[Trial] = []
        self.steps: list[Step] = []
        self.notes: list[str] = []
        self.measurers: dict[str, Measurer] = {}

    # -- measuring ------------------------------------------------------------------------------
    def measurer(self, setup: Setup) -> Measurer:
        """The measurer of one setup: its pins over the spec, its arguments after the shared ones."""
        key = setup.model_dump_json()
        if key not in self.measurers:
            spec = self.spec.over({n: f"=={v}" for n, v in setup.packages.items()}, self.job.index_url)
            probe = self.job.probe.with_args(setup.args, setup.env)
            self.measurers[key] = self.engine.measurer(spec, probe, self.job.index_url, self.run_id)
        return self.measurers[key]

    def raw_value(self, setup: Setup) -> Optional[float]:
        """The metric of a setup before any threshold exists (the ends, for ``auto``)."""
        m = self.measurer(setup)
        ms = [m.measure(self.candidate, r) for r in range(self.job.criterion.repeats)]
        return metric_value(ms, self.job.criterion.metric)

    @property
    def probes_run(self) -> int:
        """Probes this run ran."""
        return sum(m.probes_run for m in self.measurers.values())

    @property
    def reused(self) -> int:
        """Measurements this run took from the store (taken by an earlier run)."""
        return len(set().union(*(m.reused_keys for m in self.measurers.values())))

    def note(self, text: str) -> None:
        """A note for the user and the result."""
        self.notes.append(text)
        if self.handler is not None:
            self.handler.note(text)

    def trial(self, label: str, setup: Setup, applied: list[Change], calibrated: Calibrated,
              sides: dict[Verdict, str]) -> tuple[Trial, Judgement]:
        """Measure and judge one setup, store it as a step, keep it as a trial."""
        measurer = self.measurer(setup)
        j = judge(measurer, calibrated, self.candidate)
        t = trial_of(len(self.trials), label, applied, j, sides.get(j.verdict))
        self.trials.append(t)
        self._record(t, j)
        return t, j

    def _record(self, t: Trial, j: Judgement) -> None:
        step = Step(seq=t.seq, phase="diff", candidate=t.label, date=self.candidate.date, verdict=t.verdict,
                    value=t.value, metric=self.job.criterion.metric, metrics=j.metrics,
                    repeats=len(j.measurements), seconds=round(j.seconds, 3), reason=t.reason, reused=t.reused)
        self.steps.append(step)
        self.record.step(StepRow(run_id=self.run_id, seq=t.seq, candidate=f"diff {t.label}", verdict=t.verdict,
                                 value=t.value, reason=t.reason, seconds=step.seconds, measurements=t.measurements))
        if self.handler is not None:
            self.handler.step(step)

    # -- the run --------------------------------------------------------------------------------
    def run(self, follow: Callable[[DiffAnswer], Followed] = lambda answer: Followed()) -> DiffResult:
        """Run the diff to its answer, then ``follow`` it (the bisect of a package that is the whole
        difference, offered or run); the run row and every step are stored as they happen, the result
        once, built from all of it."""
        self.record.begin()
        self.run_id = self.record.run_id   # (a stopped diff another process took up first: a run of its own)
        try:
            answer = _Search(self).run()
            followed = follow(answer)
        except BaseException:
            self.record.save(RunState.INTERRUPTED)
            raise
        result = self.result(answer, followed)
        self.record.save(result.status, result.model_dump(mode="json"))
        return result

    def result(self, answer: DiffAnswer, followed: Followed) -> DiffResult:
        """The diff's result, built once: the job, the search's answer, the run's record and what followed."""
        job = self.job
        return DiffResult(
            run_id=self.run_id, status=answer.status, reason=answer.reason, package=job.package, version=job.version,
            metric=job.criterion.metric, criterion=answer.criterion, threshold=answer.threshold, a=job.a, b=job.b,
            a_value=answer.value("A"), b_value=answer.value("B"), start=answer.start, changes=answer.changes,
            minimal=answer.minimal, trials=answer.trials, proof=answer.proof, bound=answer.bound,
            steps=list(self.steps), notes=list(self.notes), probes_run=self.probes_run,
            measurements_reused=self.reused, command=list(self.command), follow_command=followed.command,
            followed=followed.result, probe=_probe_facts(job))


def knobs_of(j: Judgement) -> Optional[dict]:
    """The effective settings the probe reported (``knobs`` in its result), if it did."""
    ok = [m for m in j.measurements if m.status is Status.OK]
    return ok[-1].result.knobs if ok and ok[-1].result else None


class _Search:
    """One diff's decisions over a :class:`Differ`'s measurements."""

    def __init__(self, d: Differ):
        self.d, self.job = d, d.job
        self.changes = changes_between(self.job.a, self.job.b)
        self.start, self.to_b = self.job.a, True
        self.sides: dict[Verdict, str] = {}
        self.known: dict[Subset, Trial] = {}   # subsets measured before the search (the loop's knobs at once)
        self.minimiser: Optional[ChangeSearch] = None
        self.checks = 0

    @property
    def start_name(self) -> str:
        return "A" if self.to_b else "B"

    def run(self) -> DiffAnswer:
        crit, ends = self.job.criterion, {"A": self.job.a, "B": self.job.b}
        if needs_endpoints(crit):
            values = {name: self.d.raw_value(setup) for name, setup in ends.items()}
            missing = [name for name, v in values.items() if v is None]
            if missing:
                return self.unmeasured(missing, ends)
            if crit.auto and abs(values["A"] - values["B"]) <= max(crit.noise, 1e-12):
                return self.same(values, ends)
            calibrated = calibrate(crit, values["A"], values["B"])
        else:
            calibrated = calibrate(crit)
        ta, ja = self.d.trial("A", self.job.a, [], calibrated, {})
        tb, jb = self.d.trial("B", self.job.b, [], calibrated, {})
        skipped = next((t for t in (ta, tb) if t.verdict is Verdict.SKIP), None)
        if skipped is not None:
            return self.result(calibrated.describe(), DiffStatus.UNDECIDED,
                               f"{skipped.label} could not be judged: {skipped.reason}")
        if ta.verdict is tb.verdict:
            return self.result(calibrated.describe(), DiffStatus.NO_DIFFERENCE,
                               f"A and B measure on the same side of {calibrated.describe()} ({ta.reason}; "
                               f"{tb.reason}): there is no difference to explain")
        self.sides = {ta.verdict: "A", tb.verdict: "B"}
        ta.side, tb.side = "A", "B"
        self.expand(calibrated, ja, jb)
        return self.search(calibrated)

    def same(self, values: dict[str, float], ends: dict[str, Setup]) -> DiffAnswer:
        """Both ends measure the same (auto has no midpoint to judge by): an answer, with what was compared."""
        metric = self.job.criterion.metric
        level = calibrate(self.job.criterion.model_copy(update={"auto": False, "threshold": values["A"]}))
        for name in ("A", "B"):
            self.d.trial(name, ends[name], [], level, {})
        shown = " and ".join(f"{name} {human_value(values[name], metric)}" for name in ("A", "B"))
        return self.result(f"{metric} (auto: midway between A and B)", DiffStatus.NO_DIFFERENCE,
                           f"A and B measure the same {metric} ({shown}, within {self.job.criterion.noise:g}): there "
                           "is no difference to explain")

    def unmeasured(self, missing: list[str], ends: dict[str, Setup]) -> DiffAnswer:
        """An end gave no value, so there is no threshold: record those ends (SKIP) and say why."""
        placeholder = calibrate(self.job.criterion.model_copy(update={"auto": False, "max_increase": None,
                                                                      "threshold": 0.0}))
        trials = [self.d.trial(name, ends[name], [], placeholder, {})[0] for name in missing]
        why = "; ".join(f"{t.label} could not be judged: {t.reason}" for t in trials)
        return self.result(f"{self.job.criterion.metric} (auto: midway between A and B)", DiffStatus.UNDECIDED, why)

    def expand(self, calibrated: Calibrated, ja: Judgement, jb: Judgement) -> None:
        """A differing loop as its knobs, when the starting loop with all of them reproduces the other side
        (tried from A's loop first, then from B's)."""
        expanded = expand_loop(self.changes, knobs_of(ja), knobs_of(jb))
        if expanded is None:
            return
        for start, to_b in ((self.job.a, True), (self.job.b, False)):
            label = trial_label("A" if to_b else "B", expanded, to_b)
            t, _ = self.d.trial(label, trial_setup(start, expanded, to_b), expanded, calibrated, self.sides)
            self.checks += 1
            if t.side == ("B" if to_b else "A"):
                self.changes, self.start, self.to_b = expanded, start, to_b
                self.known[frozenset(range(len(expanded)))] = t
                knobs = ", ".join(c.name for c in expanded if c.kind is ChangeKind.KNOB)
                self.d.note(f"--loop differs: searched as the knobs the two loops imply ({knobs}); "
                            f"{t.label} reproduces {'B' if to_b else 'A'}")
                return
        self.d.note("the loop's knobs do not reproduce its effect from either side's loop: the loop itself is "
                    "one change")

    def outcome(self, t: Trial) -> Outcome:
        if t.side is None:
            return Outcome.UNRESOLVED
        return Outcome.STAYS if t.side == self.start_name else Outcome.FLIPS

    def measure(self, subset: Subset, calibrated: Calibrated) -> Trial:
        applied = [self.changes[i] for i in sorted(subset)]
        return self.d.trial(trial_label(self.start_name, applied, self.to_b),
                            trial_setup(self.start, applied, self.to_b), applied, calibrated, self.sides)[0]

    def search(self, calibrated: Calibrated) -> DiffAnswer:
        """ddmin over the changes (bisection.change_search, the engine a bisect's attribution shares)."""
        self.minimiser = ChangeSearch(self.changes, lambda s: self.measure(s, calibrated), self.outcome)
        for subset, t in self.known.items():
            self.minimiser.know(subset, t)
        minimal = self.minimiser.minimal()
        if not self.minimiser.proven_minimal(minimal):
            skipped = next((t for t in self.d.trials if t.side is None), None)
            why = f": {skipped.label} could not be judged ({skipped.reason})" if skipped else ""
            return self.result(calibrated.describe(), DiffStatus.UNDECIDED,
                               f"the difference lies within {len(minimal)} changes, not proven minimal{why}")
        other = "B" if self.to_b else "A"
        reason = f"{self.minimiser.described(minimal)} moves {self.start_name} to {other}'s side" + (
            "; no smaller set does" if len(minimal) > 1 else "")
        return self.result(calibrated.describe(), DiffStatus.FOUND, reason, minimal, calibrated.threshold)

    def proof(self, minimal: Subset) -> list[int]:
        """The ends, the minimal set applied, each of its subsets one short, and the full set."""
        return sorted({0, 1, *self.minimiser.proof(minimal, self.minimiser.everything)})

    def result(self, criterion: str, status: DiffStatus, reason: str, minimal: Subset = frozenset(),
               threshold: Optional[float] = None) -> DiffAnswer:
        n, found = len(self.changes), status is DiffStatus.FOUND
        bound = 2 + self.checks + (single_bound(n) if len(minimal) == 1 else worst_bound(n))
        return DiffAnswer(status=status, reason=reason, criterion=criterion, trials=list(self.d.trials),
                          start=self.start_name, changes=self.changes,
                          minimal=[self.changes[i] for i in sorted(minimal)], threshold=threshold,
                          proof=self.proof(minimal) if found else [], bound=bound if found else 0)


def _probe_facts(job: DiffJob) -> dict:
    p = job.probe
    return {"probe": p.label(), "args": p.args, "fingerprint": p.fingerprint()}
