"""The typed result of a bisect (what ``bisector.bisect`` returns and ``--json`` prints)."""
from __future__ import annotations

import shlex
from typing import Annotated, Any, Optional

from pydantic import BaseModel, BeforeValidator, PlainSerializer, model_serializer, model_validator

from bisector.redact import mask_words
from bisector.core.changes import Attribution, Confirmation
from bisector.data import VERSION
from bisector.core.candidate import CandidateKind
from bisector.core.search import Outcome
from bisector.core.stats import SampleEvidence
from bisector.core.units import declare
from bisector.core.points import Point, ProbeFacts, RunEnvironment, Step
from bisector.core.verdict import Verdict


def _words(value: Any) -> Any:
    """A command as words; one stored (or written by hand) as one string is split once, here."""
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError:
            return [value]
    return value


def _joined(value: Optional[list[str]]) -> Optional[str]:
    """A command as stored and in JSON: shell words (``shlex.split`` gives them back), its secrets masked."""
    return shlex.join(mask_words(value)) if value is not None else None


# a command bisector ran or offers, as words from the moment it is recorded (``sys.argv``) to the moment it is
# shown; stored and printed in JSON as one shell-quoted string, read back from that string (or an older one)
CommandWords = Annotated[Optional[list[str]], BeforeValidator(_words), PlainSerializer(_joined)]


class CommitRange(BaseModel):
    """The nightly level's answer in commits: the nightly index the nightlies came from (credentials
    masked), the commits the two boundary builds say they were built from (``torch.version.git_version``,
    older first), the compare view between them, and how many commits lie between them when a clone of
    the repository was at hand (``--repo``), else why that count is missing."""

    index_url: Optional[str] = None
    older: Optional[str] = None
    newer: Optional[str] = None
    link: Optional[str] = None
    commits: Optional[int] = None
    why_no_count: Optional[str] = None


class Contrast(BaseModel):
    """Another setting of the same probe (its ``args``) measured at the range's two ends: how a
    different setup (accelerate's own loop, say) sees the same versions."""

    label: str
    args: list[str]
    points: list[Point] = []


class ReproSide(BaseModel):
    """What the repro script printed in one side's environment, and the run's verdict on it."""

    value: Optional[float] = None
    verdict: Verdict
    reason: Optional[str] = None


class Repro(BaseModel):
    """The standalone script ``bisector report --repro FILE`` wrote, run in two fresh environments built
    from its own install lines: ``verified`` when it gives the bisect's verdicts there (GOOD, then BAD);
    ``how``: what stood in for what the lines name (the bisect's torch, a local clone), in words;
    ``sha256``: the script verified (the same script is not verified twice); ``left_out``: what the command
    names that the script could not carry (a directory, a data file: each with why), to be provided by hand."""

    path: str
    last_good: ReproSide
    first_bad: ReproSide
    verified: bool
    metric: Optional[str] = None
    threshold: Optional[float] = None
    how: list[str] = []
    sha256: Optional[str] = None
    left_out: list[str] = []

    @model_serializer(mode="wrap")
    def _only_what_is_known(self, handler):   # a record made before fresh-venv verification reads as it did
        data = handler(self)
        for key in ("how", "sha256", "left_out"):
            if not getattr(self, key):
                data.pop(key, None)
        return data


def made_by() -> str:
    """The version of bisector that is running (what a result records as its maker)."""
    return VERSION


class BisectResult(BaseModel):
    """The answer: ``status`` is found, no-regression, predates-range or undecided.

    ``attribution`` says which change of the boundary's environments explains a found step (the
    candidate, a companion, or only a set together); ``followed`` is the bisect of that companion
    between its two versions; ``confirmation`` says whether reverting a commit culprit undoes it.

    ``metric`` is the metric the criterion reads (None for exit-code and metric-free probes);
    ``reference`` is what the upstream report measured and ``contrast`` another setting measured at
    the range's ends. Each of these is serialized only when known, so results stored before they
    existed read and render as they did. So are ``good_end`` / ``bad_end`` (the range's endpoints as
    measured), ``threshold`` (the criterion's, calibrated), ``repo_url`` (where commit, PR and compare
    links point), ``bisector_version`` (what made the result), ``repro`` (``bisector report --repro``) and
    ``commit_range`` (torch's nightly level: the commits between the last good and first bad nightlies).
    ``evidence`` (stats mode only, else not serialized): each boundary candidate's samples, the good
    endpoint's samples it was compared with, the p-values and the shift.
    """

    run_id: str
    package: str
    mode: CandidateKind
    status: Outcome
    reason: str
    find_fix: bool = False
    criterion: str
    metric: Optional[str] = None
    first_bad: Optional[Point] = None
    last_good: Optional[Point] = None
    ambiguous: list[str] = []
    probes_run: int = 0
    measurements_reused: int = 0
    steps: list[Step] = []
    notes: list[str] = []
    compare_link: Optional[str] = None
    refine_command: CommandWords = None   # commands as words (shown joined, never split again)
    widen_command: CommandWords = None
    command: CommandWords = None
    decision_rule: Optional[str] = None
    probe: ProbeFacts = ProbeFacts()
    environment: RunEnvironment = RunEnvironment()
    also_changed: dict[str, list[str]] = {}   # stack package -> [last good version, first bad version]
    attribution: Optional[Attribution] = None   # which of those changes explains the step
    confirmation: Optional[Confirmation] = None  # a commit culprit reverted on the bad end, measured
    followed: Optional["BisectResult"] = None   # the companion's own bisect, when the cause is a companion
    log: list[str] = []
    reference: Optional[dict[str, Any]] = None   # what the upstream report measured ([reference])
    contrast: Optional[Contrast] = None
    evidence: dict[str, SampleEvidence] = {}  # stats mode: "last_good" / "first_bad" -> samples and p-values
    good_end: Optional[Point] = None    # the range's endpoints as measured (the outermost phase's)
    bad_end: Optional[Point] = None
    threshold: Optional[float] = None
    repo_url: Optional[str] = None
    bisector_version: Optional[str] = None
    repro: Optional[Repro] = None
    commit_range: Optional[CommitRange] = None   # torch's nightly level: the commits between two nightlies
    units: dict[str, str] = {}   # metric -> the unit its probe declared (bisector.core.units), when any did

    @model_validator(mode="after")
    def _units_known(self) -> "BisectResult":
        declare(self.units)   # a stored result prints its probe's declared units wherever it is read
        return self

    @model_serializer(mode="wrap")
    def _only_what_is_known(self, handler):
        data = handler(self)
        for key in ("metric", "reference", "contrast", "attribution", "confirmation", "followed", "good_end",
                    "bad_end", "threshold", "repo_url", "bisector_version", "repro", "commit_range"):
            if getattr(self, key) is None:
                data.pop(key, None)
        if not self.evidence:
            data.pop("evidence", None)
        if not self.units:
            data.pop("units", None)
        return data

    @property
    def exit_code(self) -> int:
        """0 for an answer (found, no-regression), 3 otherwise."""
        return 0 if self.status in (Outcome.FOUND, Outcome.NO_REGRESSION) else 3


BisectResult.model_rebuild()
