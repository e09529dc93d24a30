"""Which change of setup explains a difference, as reported: the changes between two setups, the
trials that measured subsets of them, the verdict of a bisect's companion attribution, and the
confirmation of a commit culprit by reverting it (typed, so the JSON and the library agree)."""
from __future__ import annotations

import enum
from typing import Optional

from pydantic import BaseModel

from bisector.core.verdict import Verdict


class ChangeKind(enum.StrEnum):
    """What one change between two setups is."""

    CANDIDATE = "candidate"   # the package under test (last good -> first bad)
    PACKAGE = "package"       # another package's version
    ARG = "arg"               # a probe argument, as given
    KNOB = "knob"             # a probe setting as the probe reports it (``knobs`` in its result)
    ENV = "env"               # an environment variable the probe (your program) runs with


class Change(BaseModel):
    """One difference: ``name`` is a package, a probe flag or a knob; ``a`` and ``b`` its two values
    (None: absent on that side); ``flag`` how a knob is set on the probe's command line."""

    kind: ChangeKind
    name: str
    a: Optional[str] = None
    b: Optional[str] = None
    flag: Optional[str] = None

    def describe(self) -> str:
        """'accelerate 0.27.2 → 0.28.0', 'zero_grad_target model → optimizer', '--loop trainer → accelerate'."""
        a, b = ("(none)" if v is None else v for v in (self.a, self.b))
        return f"{self.name} {a} → {b}"


class Trial(BaseModel):
    """One measured setup: which changes were applied to the starting side, and what it measured.

    ``side`` is "A"/"B" (diff) or "last good"/"first bad" (attribution) when the setup landed on one
    side, None when it could not be judged."""

    seq: int
    label: str
    applied: list[str] = []
    verdict: Verdict
    value: Optional[float] = None
    side: Optional[str] = None
    reason: Optional[str] = None
    measurements: list[str] = []
    reused: bool = False


class AttributionKind(enum.StrEnum):
    """Which change of a bisect's boundary explains the step."""

    CANDIDATE = "candidate"       # the package under test alone
    COMPANION = "companion"       # one other package that moved with it
    INTERACTION = "interaction"   # only a set of changes together
    UNDECIDED = "undecided"       # the trials could not tell (a SKIP where it mattered)


class Attribution(BaseModel):
    """The verdict on the changes between the last good and first bad environments.

    ``packages``: the packages whose move explains the step (for ``candidate``, the package under
    test). ``changes``: everything that moved (the candidate first). ``trials``: every setup measured,
    in order; ``proof``: the ``seq`` of the trials that prove the verdict. ``bound``: the most trials
    the search could have needed (see bisector.core.ddmin)."""

    kind: AttributionKind
    packages: list[str] = []
    changes: list[Change] = []
    minimal: list[Change] = []
    trials: list[Trial] = []
    proof: list[int] = []
    reason: str
    bound: int = 0


class ConfirmationStatus(enum.StrEnum):
    """What reverting a commit culprit showed."""

    CONFIRMED = "confirmed"              # reverted, the metric is back on the good side
    NOT_CAUSAL = "not-causal"            # reverted, still bad: the commit is where it shows, not why
    REVERT_CONFLICT = "revert-conflict"  # the revert does not apply cleanly (``conflicts``)
    UNDECIDED = "undecided"              # the reverted tree could not be measured


class Confirmation(BaseModel):
    """The culprit's change reverted on ``onto`` (the bad end of the range), built and measured.

    ``tree`` is the git tree of the reverted source (what the environment's revision stamp names)."""

    status: ConfirmationStatus
    culprit: str
    onto: str
    tree: Optional[str] = None
    conflicts: list[str] = []
    verdict: Optional[Verdict] = None
    value: Optional[float] = None
    reason: str
    measurements: list[str] = []
