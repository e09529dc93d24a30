"""The typed result of a bisect (what ``bisector.bisect`` returns and ``--json`` prints)."""
from __future__ import annotations

import datetime as dt
from typing import Any, Optional

from pydantic import BaseModel

from .candidate import Candidate, CandidateKind


class Point(BaseModel):
    """A candidate as reported: ref, commit facts, links, and its metric value."""

    ref: str
    kind: str
    sha: Optional[str] = None
    date: Optional[dt.datetime] = None
    subject: Optional[str] = None
    author: Optional[str] = None
    pr: Optional[int] = None
    link: Optional[str] = None
    pr_link: Optional[str] = None
    value: Optional[float] = None
    metrics: dict[str, float] = {}
    details: dict[str, Any] = {}     # compact probe facts behind the value: per-cell peaks, peak phases

    @classmethod
    def of(cls, c: Candidate, value: Optional[float] = None, metrics: Optional[dict] = None) -> "Point":
        commit = c.kind is CandidateKind.COMMIT
        link = pr_link = None
        if commit and c.repo_url:
            link = f"{c.repo_url}/commit/{c.ref}"
            pr_link = f"{c.repo_url}/pull/{c.pr}" if c.pr else None
        return cls(ref=c.ref if not commit else c.ref[:12], kind=c.kind.value, sha=c.ref if commit else None,
                   date=c.date, subject=c.subject, author=c.author, pr=c.pr, link=link, pr_link=pr_link,
                   value=value, metrics=metrics or {})


class Step(BaseModel):
    """One verdict given during the bisect."""

    seq: int
    phase: str
    candidate: str
    date: Optional[dt.datetime] = None
    verdict: str
    metric: Optional[str] = None
    value: Optional[float] = None
    metrics: dict[str, float] = {}
    repeats: int = 1
    seconds: float
    reason: Optional[str] = None
    reused: bool = False


class BisectResult(BaseModel):
    """The answer: ``status`` is found, no-regression, predates-range or undecided."""

    run_id: str
    package: str
    mode: str
    status: str
    reason: str
    find_fix: bool = False
    criterion: str
    first_bad: Optional[Point] = None
    last_good: Optional[Point] = None
    ambiguous: list[str] = []
    probes_run: int = 0
    measurements_reused: int = 0
    steps: list[Step] = []
    notes: list[str] = []
    compare_link: Optional[str] = None
    refine_command: Optional[str] = None
    widen_command: Optional[str] = None
    command: Optional[str] = None
    decision_rule: Optional[str] = None
    probe: dict[str, Any] = {}
    environment: dict[str, Any] = {}
    also_changed: dict[str, list[str]] = {}   # stack package -> [last good version, first bad version]
    log: list[str] = []

    @property
    def exit_code(self) -> int:
        return 0 if self.status in ("found", "no-regression") else 3
