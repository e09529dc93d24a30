"""Terminal progress: one line per step (candidate, metric value, verdict, seconds), notes, and the
wrapping every console line gets (the terminal's width; 100 columns in a log)."""
from __future__ import annotations

import shutil
import sys
import textwrap
from typing import Callable, Optional, TextIO

from bisector.core.candidate import Candidate
from bisector.core.points import Step
from bisector.core.units import human_value
from bisector.core.verdict import Verdict
from bisector.safety.safe_text import visible


LOG_WIDTH = 100


def console_width(stream: Optional[TextIO] = None) -> int:
    """The terminal's columns when ``stream`` is one, else LOG_WIDTH (a log, a pipe)."""
    stream = stream or sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return max(40, shutil.get_terminal_size((LOG_WIDTH, 24)).columns) if tty else LOG_WIDTH


def wrapped(text: str, width: int) -> str:
    """Every line of ``text`` wrapped to ``width`` columns, continuation lines indented two more than
    the line's own indent; words (URLs) are never broken, and a line indented four spaces (a command
    to copy) is left whole."""
    out = []
    for line in text.splitlines():
        indent = " " * (len(line) - len(line.lstrip(" ")))
        if len(indent) >= 4:
            out.append(line)
            continue
        out += textwrap.wrap(line, width, subsequent_indent=indent + "  ", break_long_words=False,
                             break_on_hyphens=False) or [line]
    return "\n".join(out)


class PrintHandler:
    """Prints the bisect as it happens, to stderr so that ``--json`` stdout stays clean."""

    def __init__(self, stream=None, printer: Optional[Callable[[str], None]] = None):
        self.stream = stream or sys.stderr
        self.printer = printer   # a live display's printer (lines above its region), else the stream
        self.width = console_width(self.stream)

    def _print(self, text: str) -> None:
        text = wrapped(visible(text), self.width)   # a reason or a note quotes probes and repositories
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

    def failed_output(self, step: Step, lines: list[str]) -> None:
        """The last lines a failed step's run printed (its error), under the step."""
        self._print("\n".join(f"      | {line}" for line in lines))

    def step(self, step: Step) -> None:
        """One verdict was given."""
        value = "-" if step.value is None else human_value(step.value, step.metric)
        flag = " (stored)" if step.reused else ""
        said = step.verdict is Verdict.SKIP or (step.verdict is Verdict.BAD and step.value is None)   # a failure
        reason = f"  [{step.reason}]" if said and step.reason else ""
        self._print(f"  step {step.seq + 1:>2} {step.phase:<9} {step.candidate:<14} {value:>14}  "
                    f"{step.verdict.value.upper():<4} {step.seconds:7.1f}s{flag}{reason}{_ranks(step)}")


def _ranks(step: Step) -> str:
    """Each rank's own value where the metric has them (``<metric>.rank<N>``: a launcher's ranks)."""
    prefix = f"{step.metric}.rank" if step.metric else None
    ranks = sorted((int(k[len(prefix):]), v) for k, v in step.metrics.items()
                   if prefix and k.startswith(prefix) and k[len(prefix):].isdigit())
    return ("  (" + ", ".join(f"rank {r} {human_value(v, step.metric)}" for r, v in ranks) + ")") if ranks else ""
