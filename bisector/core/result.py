"""The typed result of a bisect (what ``bisector.bisect`` returns and ``--json`` prints)."""
from __future__ import annotations

import datetime as dt
import shlex
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, field_serializer, field_validator, model_serializer, model_validator

from bisector.core.changes import Attribution, Confirmation
from bisector.data import VERSION
from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.requirements import Pin, held_pin
from bisector.core.search import Outcome
from bisector.core.stats import SampleEvidence
from bisector.core.units import declare
from bisector.core.verdict import Verdict


class ProbeFacts(BaseModel):
    """Which probe a run ran: its label (``probe``: the built-in name, a script's path or the command), its
    ``kind`` (built-in, script, command, your program), effective ``args``, ``timeout`` and ``fingerprint``,
    and what the probe said of itself (``name``, ``version``, ``config_hash``, ``config``, ``schema_version``:
    which explainer reads its results). Stored and rendered as a mapping of the facts that are known."""

    model_config = ConfigDict(extra="allow")

    probe: Optional[str] = None
    kind: Optional[str] = None
    args: Optional[str] = None
    timeout: Optional[float] = None
    fingerprint: Optional[str] = None
    name: Optional[str] = None
    version: Optional[Any] = None
    config_hash: Optional[Any] = None
    config: Optional[dict[str, Any]] = None
    schema_version: Optional[Any] = None

    @model_serializer(mode="wrap")
    def _known(self, handler):
        return {k: v for k, v in handler(self).items() if v is not None}

    @property
    def label(self) -> str:
        """The probe as a report names it."""
        return self.probe or self.name or "?"

    def __bool__(self) -> bool:
        return bool(self.model_dump())


class PointEnv(BaseModel):
    """A reported point's environment: the interpreter, torch (its build, where it came from, and for a
    nightly the commit it was built from), what it measured on (the GPU with CUDA and the driver, or the
    CPU), the meter, and the other packages of the stack and the spec's companions (name -> version).
    Stored and rendered as one flat mapping (``python``, ``torch``, ``torch from``, ..., then the packages)."""

    python: Optional[str] = None
    torch: Optional[str] = None
    torch_from: Optional[str] = None
    torch_git: Optional[str] = None
    cuda: Optional[str] = None
    gpu: Optional[str] = None
    driver: Optional[str] = None
    cpu: Optional[str] = None
    meter: Optional[str] = None
    packages: dict[str, str] = {}

    @model_validator(mode="before")
    @classmethod
    def _from_flat(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "packages" in data:
            return data
        fields = {ENV_KEYS[k]: v for k, v in data.items() if k in ENV_KEYS}
        return {**fields, "packages": {k: str(v) for k, v in data.items() if k not in ENV_KEYS}}

    @model_serializer
    def _flat(self) -> dict[str, str]:
        return self.flat()

    def flat(self) -> dict[str, str]:
        """Every fact as the report names it, in order: the interpreter, torch, the device, the meter, then
        the packages."""
        out = {key: getattr(self, name) for key, name in ENV_KEYS.items()}
        return {**{k: v for k, v in out.items() if v not in (None, "")}, **self.packages}

    def held(self) -> dict[str, str]:
        """What the environment held beyond its interpreter and device: torch (and where it came from, its
        commit) and every package."""
        out = {"torch": self.torch, "torch from": self.torch_from, "torch git": self.torch_git}
        return {**{k: v for k, v in out.items() if v}, **self.packages}

    @property
    def device(self) -> Optional[str]:
        """The GPU, else the CPU it measured on."""
        return self.gpu or self.cpu

    def __bool__(self) -> bool:
        return bool(self.flat())


ENV_KEYS = {"python": "python", "torch": "torch", "torch from": "torch_from", "torch git": "torch_git",
            "cuda": "cuda", "gpu": "gpu", "driver": "driver", "cpu": "cpu", "meter": "meter"}


class Point(BaseModel):
    """A candidate as reported: ref, commit facts, links, and its metric value."""

    ref: str
    kind: CandidateKind
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
    env: PointEnv = PointEnv()       # its environment: python, torch, the ML stack and companions, device, meter
    pins: list[Pin] = []             # every package of its environment, name and version (a repro's pins)

    @field_validator("pins", mode="before")
    @classmethod
    def _typed_pins(cls, value: Any) -> Any:
        return [held_pin(x) for x in value] if isinstance(value, list) else value

    @field_serializer("pins")
    def _pin_words(self, value: list[Pin]) -> list[str]:
        return [str(pin) for pin in value]

    @classmethod
    def of(cls, c: Candidate, value: Optional[float] = None, metrics: Optional[dict] = None) -> "Point":
        commit = c.kind is CandidateKind.COMMIT
        link = pr_link = None
        if commit and c.repo_url:
            link = f"{c.repo_url}/commit/{c.ref}"
            pr_link = f"{c.repo_url}/pull/{c.pr}" if c.pr else None
        return cls(ref=c.ref if not commit else c.ref[:12], kind=c.kind, sha=c.ref if commit else None,
                   date=c.date, subject=c.subject, author=c.author, pr=c.pr, link=link, pr_link=pr_link,
                   value=value, metrics=metrics or {})


class Step(BaseModel):
    """One verdict given during the bisect."""

    seq: int
    phase: str
    candidate: str
    date: Optional[dt.datetime] = None
    verdict: Verdict
    metric: Optional[str] = None
    value: Optional[float] = None
    metrics: dict[str, float] = {}
    repeats: int = 1
    seconds: float
    reason: Optional[str] = None
    reused: bool = False

    def log_line(self) -> str:
        """One git-bisect-style line: verdict, phase, candidate, value, repeats, seconds, reason."""
        value = f" value={self.value:.6g}" if self.value is not None else ""
        repeats = f" repeats={self.repeats}" if self.repeats != 1 else ""
        reason = f" # {self.reason}" if self.reason else ""
        return f"{self.verdict} {self.phase} {self.candidate}{value}{repeats} ({self.seconds:.1f}s){reason}"


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
    ``sha256``: the script verified (the same script is not verified twice)."""

    path: str
    last_good: ReproSide
    first_bad: ReproSide
    verified: bool
    metric: Optional[str] = None
    threshold: Optional[float] = None
    how: list[str] = []
    sha256: Optional[str] = None

    @model_serializer(mode="wrap")
    def _only_what_is_known(self, handler):   # a record made before fresh-venv verification reads as it did
        data = handler(self)
        for key in ("how", "sha256"):
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
    refine_command: Optional[list[str]] = None   # commands as words (shown joined, never split again)
    widen_command: Optional[list[str]] = None
    command: Optional[list[str]] = None
    decision_rule: Optional[str] = None
    probe: ProbeFacts = ProbeFacts()
    environment: dict[str, Any] = {}
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

    @field_validator("refine_command", "widen_command", "command", mode="before")
    @classmethod
    def _words(cls, value: Any) -> Any:
        """A command as words; a result stored (or written by hand) with it as one string is split once, here."""
        if isinstance(value, str):
            try:
                return shlex.split(value)
            except ValueError:
                return [value]
        return value

    @field_serializer("refine_command", "widen_command", "command")
    def _joined(self, value: Optional[list[str]]) -> Optional[str]:
        return shlex.join(value) if value is not None else None

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
