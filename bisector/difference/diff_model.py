"""``bisector diff``'s job and result: two setups at one version of a package, and the smallest
difference between them that moves one to the other's side of the criterion (typed, like a bisect's)."""
from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, model_serializer

from bisector.core.changes import Change, Trial
from bisector.core.criterion import Criterion
from bisector.core.result import BisectResult, CommandWords
from bisector.core.points import Step
from bisector.job.probe import BuiltinProbe, Probe

SIDES = ("A", "B")


class Setup(BaseModel):
    """One side: package pins (canonical name -> version, the package under test excluded) and the
    probe arguments it adds to the shared ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    packages: dict[str, str] = {}
    args: list[str] = []
    env: dict[str, str] = {}   # environment variables of this side (--a-env NAME=VALUE)

    @model_serializer(mode="wrap")
    def _without_empty_env(self, handler):
        """A side without variables keeps the shape (and a diff its config hash) it had before they existed."""
        out = handler(self)
        if not self.env:
            out.pop("env", None)
        return out


class DiffJob(BaseModel):
    """A whole diff: the package under test at ``version``, setups ``a`` and ``b``, the probe (its
    shared ``args``), the criterion (``auto``: midway between the two sides), the env spec and index."""

    model_config = ConfigDict(extra="forbid")

    package: str
    version: str
    a: Setup
    b: Setup
    probe: Probe = BuiltinProbe(name="ga_memory")
    criterion: Criterion
    env: str = "default"
    index_url: Optional[str] = None
    follow: bool = False
    follow_repo: Optional[str] = None

    @property
    def config_hash(self) -> str:
        """Identical diffs share it (each run has its own id); their measurements are reused by their keys."""
        return hashlib.sha256(("diff\0" + self.model_dump_json()).encode()).hexdigest()[:12]


class DiffStatus(enum.StrEnum):
    """How a diff ended."""

    FOUND = "found"                  # a minimal set of changes moves the starting side to the other
    NO_DIFFERENCE = "no-difference"  # both sides measure on the same side of the criterion
    UNDECIDED = "undecided"          # an end or the trials could not be judged


@dataclass(frozen=True)
class DiffAnswer:
    """What the search found (bisector.difference.diff_engine): how it ended and why, the criterion as it
    judged, the side its trials started from, the changes and the minimal set, every measured setup (A
    and B first) and the ``seq`` of those that prove the answer, and its bound."""

    status: DiffStatus
    reason: str
    criterion: str
    trials: list[Trial]
    start: str = "A"
    changes: list[Change] = field(default_factory=list)
    minimal: list[Change] = field(default_factory=list)
    threshold: Optional[float] = None
    proof: list[int] = field(default_factory=list)
    bound: int = 0

    def value(self, side: str) -> Optional[float]:
        """What the end ``side`` ("A" or "B") measured (its last trial)."""
        return ([None] + [t.value for t in self.trials if t.label == side])[-1]


@dataclass(frozen=True)
class Followed:
    """The bisect of the one package a diff found to be the whole difference: its command (offered, as
    words) and, when the diff followed it (--follow), its result."""

    command: Optional[list[str]] = None
    result: Optional[BisectResult] = None


class DiffResult(BaseModel):
    """The answer of ``bisector diff`` (what ``bisector.diff`` returns and ``--json`` prints).

    ``changes``: every difference between A and B (a probe loop expanded into the knobs it implies when
    they reproduce it); ``start``: the side the trials start from (A, or B when only B's loop takes the
    other's knobs); ``minimal``: the smallest set of changes that moves it to the other side;
    ``trials``: every measured setup (A and B first), ``proof`` the ``seq`` of those that prove it;
    ``bound``: the most trials the search could have needed (bisector.core.ddmin)."""

    run_id: str
    status: DiffStatus
    reason: str
    package: str
    version: str
    metric: Optional[str] = None
    criterion: str
    threshold: Optional[float] = None
    a: Setup
    b: Setup
    a_value: Optional[float] = None
    b_value: Optional[float] = None
    start: str = "A"
    changes: list[Change] = []
    minimal: list[Change] = []
    trials: list[Trial] = []
    proof: list[int] = []
    bound: int = 0
    steps: list[Step] = []
    notes: list[str] = []
    probes_run: int = 0
    measurements_reused: int = 0
    command: CommandWords = None          # as words (a stored one string is split once, when read)
    follow_command: CommandWords = None
    followed: Optional[BisectResult] = None
    probe: dict[str, Any] = {}

    @property
    def exit_code(self) -> int:
        """0 for an answer (found, no-difference), 3 otherwise."""
        return 0 if self.status in (DiffStatus.FOUND, DiffStatus.NO_DIFFERENCE) else 3
