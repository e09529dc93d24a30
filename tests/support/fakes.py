"""The one fake outside the search core, and only behind the driver's measuring seam
(bisector.decide.seam): measurements come from a table, no environment is built, no probe runs.

A table maps a candidate's ref (a version, or a commit's full SHA) to what each repeat measures:
a number (the metric's value), a :class:`Status` (that failure), an int exit code (with
``exit_code_mode``), a :class:`PartialOom` (a value, with some cells out of memory), an :class:`Absent`
(a clean result without the metric, saying why), or a list of
those, one per repeat (the last one repeats). Setups with pins laid over the spec (an attribution's
trials) read ``setups(ref, pins)`` instead.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping, Optional, Union

from bisector.core.candidate import Candidate
from bisector.core.facts import EnvFacts, ProbeResult
from bisector.core.measurement import Measurement, Status
from bisector.envs import EnvSpec
from bisector.job.probe.program_metrics import steps_left_out



class PartialOom(float):
    """A measured value whose probe run also reports cells that ran out of memory."""

    def __new__(cls, value: float, cells: tuple[str, ...] = ("bf16.ga2.h256",)):
        made = super().__new__(cls, value)
        made.cells = list(cells)
        return made


class Absent(str):
    """A clean probe result without the metric, with the probe's reason for leaving it out (the command
    meter's ``absent``); ``steps``/``skip``: a ``command/1`` result of that many optimizer steps seen and
    that ``--measure-skip``."""

    def __new__(cls, reason: str, steps: Optional[int] = None, skip: int = 1):
        made = super().__new__(cls, reason)
        made.steps, made.skip = steps, skip
        return made


Entry = Union[float, Status, list]


class FakeMeasurer:
    """Measures from ``table``; a (ref, repeat) measured before by an earlier run's measurer of the same
    factory is "reused" (counted in ``reused_keys``, no probe), as the store would make it; one this run
    took is read back as it is."""

    def __init__(self, table: Mapping[str, Entry], seen: dict, metric: str = "m", exit_code_mode: bool = False,
                 pins: Optional[dict] = None, setups: Optional[Callable[[str, dict], Entry]] = None,
                 run_id: Optional[str] = None, envs: Optional[Mapping[str, dict]] = None):
        self.table, self.seen, self.metric, self.exit_code_mode = table, seen, metric, exit_code_mode
        self.run_id = run_id
        self.envs = dict(envs or {})   # ref -> the environment facts its measurements record (EnvFacts fields)
        self.pins, self.setups = dict(pins or {}), setups
        self.probes_run = 0
        self.reused_keys: set[str] = set()
        self.asked: list[tuple[str, int]] = []
        self.prefetched: list[list[str]] = []
        self.warmed: list[list[tuple[str, int]]] = []

    def bad_input(self, m: Measurement):
        """As a program's probe reads its measurements (a command/1 result: --measure-skip beyond the steps)."""
        return steps_left_out(m)

    def measure(self, c: Candidate, repeat: int = 0) -> Measurement:
        self.asked.append((c.ref, repeat))
        key = f"{c.ref}:{c.revert or ''}:{repeat}:{sorted(self.pins.items())}"
        if key in self.seen:
            found = self.seen[key]
            if found.run_id == self.run_id:
                return found
            self.reused_keys.add(key)
            return found.model_copy(update={"reused": True})
        self.probes_run += 1
        self.seen[key] = m = self._measurement(c, repeat, key).model_copy(update={"run_id": self.run_id})
        return m

    def _measurement(self, c: Candidate, repeat: int, key: str) -> Measurement:
        entry = self.setups(c.ref, self.pins) if self.pins else self.table[c.ref]
        value = entry[min(repeat, len(entry) - 1)] if isinstance(entry, list) else entry
        base = Measurement(key=key, package=c.package, candidate=c.ref, env_fingerprint="fake",
                           probe_fingerprint="fake", repeat=repeat, status=Status.OK, seconds=1.0)
        if isinstance(value, Status):
            return base.model_copy(update={"status": value, "reason": f"{value.value} in the fake probe"})
        if self.exit_code_mode:
            return base.model_copy(update={"status": Status.EXIT_CODE, "exit_code": int(value)})
        if isinstance(value, Absent):
            result = {"schema_version": "fake/1", "absent": {self.metric: str(value)}}
            metrics = {"other": 7.0}
            if value.steps is not None:
                result.update(schema_version="command/1", measure_skip=value.skip)
                metrics["optimizer_steps"] = float(value.steps)
            return base.model_copy(update={"metrics": metrics, "result": ProbeResult.of(result)})
        fields = {"schema_version": "fake/1", "probe": {"name": "fake", "version": "1"},
                  "peak_phase": "backward" if value > 1.5 else "forward"}
        if isinstance(value, PartialOom):
            fields["oom_cells"] = value.cells
        env = EnvFacts(path="fake", **self.envs[c.ref]) if c.ref in self.envs else None
        return base.model_copy(update={"metrics": {self.metric: float(value), "other": 7.0},
                                       "result": ProbeResult.of(fields), "env": env})

    def prefetch(self, candidates: list[Candidate]) -> None:
        self.prefetched.append([c.ref for c in candidates])

    def speculate(self, needed: list[Candidate], likely: list[Candidate]) -> None:
        pass  # the fakes measure instantly: nothing to do ahead

    def warm(self, samples: list[tuple[Candidate, int]]) -> None:
        self.warmed.append([(c.ref, repeat) for c, repeat in samples])


class FakeMeasurers:
    """The factory the Bisector is handed: every phase's measurer reads the same table."""

    def __init__(self, table: Mapping[str, Entry], gpus: Optional[list[str]] = None, **options):
        self.table, self.options = table, options
        self.spec = EnvSpec(name="fake", companions={"helper": "as-of-candidate"})
        self.gpus = list(gpus or [])
        self.seen: dict = {}
        self.made: list[FakeMeasurer] = []
        self.speculates = False

    @property
    def slots(self) -> int:
        """As the local executor: one measurement per GPU, else per core."""
        return len(self.gpus) or (os.cpu_count() or 1)

    def with_probe_args(self, args: list[str]) -> "FakeMeasurers":
        """The contrast's measurers read ``options["contrast"]`` (a table like ``table``)."""
        other = FakeMeasurers(self.options.get("contrast", self.table), self.gpus,
                              **{k: v for k, v in self.options.items() if k != "contrast"})
        other.args = list(args)
        return other

    def __call__(self, run_id: str, repo_path: Optional[Path] = None) -> FakeMeasurer:
        measurer = FakeMeasurer(self.table, self.seen, run_id=run_id,
                                **{k: v for k, v in self.options.items() if k != "contrast"})
        self.made.append(measurer)
        return measurer

    def nightlies(self, index_url: str) -> "FakeMeasurers":
        """The same table and store of measurements (a nightly's ref is its row), its index remembered."""
        child = FakeMeasurers(self.table, self.gpus, **self.options)
        child.seen, child.made, child.nightly_index = self.seen, self.made, index_url
        return child

    def pinned(self, pins: dict) -> "FakeMeasurers":
        """The same table and store of measurements, with ``pins`` laid over (read through ``setups``)."""
        child = FakeMeasurers(self.table, self.gpus, **{**self.options,
                                                        "pins": {**self.options.get("pins", {}), **pins}})
        child.seen, child.made = self.seen, self.made
        return child
