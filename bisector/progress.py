"""Terminal progress: one line per step (candidate, metric value, verdict, seconds)."""
from __future__ import annotations

import sys

from .candidate import Candidate
from .result import Step
from .units import human_value


class PrintHandler:
    """Prints the bisect as it happens, to stderr so that ``--json`` stdout stays clean."""

    def __init__(self, quiet: bool = False, stream=None):
        self.stream = stream or sys.stderr
        self.total = 0
        self.metric_hint = ""

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def note(self, text: str) -> None:
        self._print(f"note: {text}")

    def plan(self, phase: str, candidates: list[Candidate]) -> None:
        self.total = len(candidates)
        self._print(f"{phase}: {len(candidates)} candidates from {candidates[0].short} to {candidates[-1].short}")

    def step(self, step: Step) -> None:
        value = "-" if step.value is None else human_value(step.value, step.metric)
        flag = " (stored)" if step.reused else ""
        reason = f"  [{step.reason}]" if step.verdict == "skip" and step.reason else ""
        self._print(f"  step {step.seq + 1:>2} {step.phase:<9} {step.candidate:<14} {value:>14}  "
                    f"{step.verdict.upper():<4} {step.seconds:7.1f}s{flag}{reason}")
