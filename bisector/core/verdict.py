"""Verdicts a probe run can give a candidate."""
from __future__ import annotations

import enum


class Verdict(enum.StrEnum):
    """What one measurement says about a candidate.

    GOOD: behaves like the good endpoint. BAD: shows the regression.
    SKIP: could not be judged (environment, crash, timeout, noise): never a guess.
    String-valued, so stored rows and report JSON hold "good" / "bad" / "skip".
    """

    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"
