"""Which failures are a verdict: a failed measurement under a criterion's failure classes (out of memory, a crash,
a timeout), an exit-code probe's code (git bisect run's contract), and "the program fails" as a criterion of its
own (a crash bisect)."""
from __future__ import annotations

from typing import Optional

from bisector.core.criterion import FAILURES, Compare, Criterion
from bisector.core.measurement import Measurement, Status
from bisector.core.verdict import Verdict


def fails(measurements: list[Measurement]) -> bool:
    """Whether the last of a candidate's measurements failed as a program fails (crash, signal, out of memory)."""
    return bool(measurements) and measurements[-1].status in FAILURES


def program_fails(c: Criterion) -> Criterion:
    """``c`` turned into "the program fails": no metric, no rule, a crash BAD (what a crash bisect judges by)."""
    return Criterion.model_validate({**c.model_dump(exclude_unset=True), "metric": None, "threshold": None,
                                     "max_increase": None, "auto": False, "compare": Compare.THRESHOLD.value,
                                     "min_effect": None, "alpha": None, "crash_is_bad": True})


def failure_verdict(m: Measurement, criterion: Criterion) -> tuple[Verdict, str]:
    """The verdict for a measurement that did not produce metrics."""
    reason = m.reason or m.status.value
    if m.status is Status.OOM and criterion.oom_is_bad:
        return Verdict.BAD, f"out of memory counts as the regression: {reason}"
    if m.status is Status.TIMEOUT and criterion.timeout_is_bad:
        return Verdict.BAD, reason
    if m.status in (Status.CRASHED, Status.BAD_OUTPUT) and criterion.crash_is_bad:
        return Verdict.BAD, reason
    return Verdict.SKIP, reason


def exit_code_verdict(code: Optional[int], reason: Optional[str] = None) -> tuple[Verdict, str]:
    """git-bisect-run contract: 0 good, 125 skip, 1-127 bad; signals and >127 are skips."""
    if code == 0:
        return Verdict.GOOD, "exit 0"
    if code == 125 or code is None or code < 0 or code > 127:
        return Verdict.SKIP, reason or f"exit {code}"
    return Verdict.BAD, f"exit {code}" + (f": {reason}" if reason else "")
