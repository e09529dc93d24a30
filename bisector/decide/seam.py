"""What the bisect needs from measuring: the two protocols that bisector.measure's Measurer and
Measurers fulfil, and that the fast tests' fakes fulfil instead (no environment, no probe)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Protocol

from bisector.core.candidate import Candidate
from bisector.core.measurement import Measurement
from bisector.envs import EnvSpec


class Measures(Protocol):
    """Measures candidates of one phase and counts what it did."""

    exit_code_mode: bool
    probes_run: int
    reused_keys: set[str]

    def measure(self, c: Candidate, repeat: int = 0) -> Measurement:
        """Repeat ``repeat`` of ``c``: stored, or taken now."""

    def bad_input(self, m: Measurement) -> Optional[str]:
        """One line when ``m`` shows the job's settings were bad input (the probe's kind knows), else None."""

    def prefetch(self, candidates: list[Candidate]) -> None:
        """Prepare what these candidates' measurements will need, in the background, in place of what was
        asked for before (an empty list drops what is still queued)."""

    def speculate(self, needed: list[Candidate], likely: list[Candidate]) -> None:
        """Measure ``likely`` candidates ahead on spare slots; cancel what is neither needed nor likely."""

    def warm(self, samples: list[tuple[Candidate, int]]) -> None:
        """Ready, together, what these (candidate, repeat) samples will run in, before they are taken."""


class MeasurerFactory(Protocol):
    """Makes each phase's measurer; says which spec environments follow and how many measure at once."""

    spec: EnvSpec
    slots: int          # measurements that can run at once
    speculates: bool    # spare slots measure the likely next candidates

    def __call__(self, run_id: str, repo_path: Optional[Path] = None) -> Measures:
        """The measurer of a phase (``repo_path``: the repository commit candidates come from)."""

    def pinned(self, pins: dict[str, str]) -> "MeasurerFactory":
        """The same factory with ``pins`` (name -> exact version) laid over the spec's companions."""
    def nightlies(self, index_url: str) -> "MeasurerFactory":
        """The same factory, nightly candidates coming from the nightly index ``index_url``."""

    def with_probe_args(self, args: list[str]) -> "MeasurerFactory":
        """The same factory with the probe's arguments replaced (a job's ``[contrast]``)."""
