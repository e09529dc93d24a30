"""Terminal progress: one line per step (candidate, metric value, verdict, seconds)."""
from __future__ import annotations

import sys
from typing import Callable, Optional

from bisector.core.candidate import Candidate
from bisector.core.result import Step
from bisector.core.units import human_value
from bisector.core.verdict import Verdict


class PrintHandler:
    """Prints the bisect as it happens, to stderr so that ``--json`` stdout stays clean."""

    def __init__(self, stream=None, printer: Optional[Callable[[str], None]] = None):
        self.stream = stream or sys.stderr
        self.printer = printer   # a live display's printer (lines above its region), else the stream

    def _print(self, text: str) -> None:
        if self.printer is not None:
            self.printer(text)
        else:
            print(text, file=self.stream, flush=True)

    def note(self, text: str) -> None:
        """A note for the user (a merge-base substitution, a refinement, ...)."""
        self._print(f"note: {text}")

    def plan(self, phase: str, candidates: list[Candidate]) -> None:
        """A phase starts over these candidates."""
        self._print(f"{phase}: {len(candidates)} candidates from {candidates[0].short} to {candidates[-1].short}")

    def step(self, step: Step) -> None:
        """One verdict was given."""
        value = "-" if step.value is None else human_value(step.value, step.metric)
        flag = " (stored)" if step.reused else ""
        reason = f"  [{step.reason}]" if step.verdict is Verdict.SKIP and step.reason else ""
        self._print(f"  step {step.seq + 1:>2} {step.phase:<9} {step.candidate:<14} {value:>14}  "
                    f"{step.verdict.value.upper():<4} {step.seconds:7.1f}s{flag}{reason}")
