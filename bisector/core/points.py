"""What a result reports of each candidate and step: a point (the candidate, its value and metrics, its
environment, its pins), the probe facts of the run, and one step of the search."""
from __future__ import annotations

import datetime as dt
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, field_serializer, field_validator, model_serializer, model_validator

from bisector.core.candidate import Candidate, CandidateKind
from bisector.core.requirements import Pin, held_pin
from bisector.core.units import human_value
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
    Typed from the measurement's facts (bisector.bisection.boundary) and stored as these fields; a report
    names each fact (bisector.report.env_labels). A result stored before that kept the one flat mapping a
    report shows (each fact under its field's name with a space for the underscore, then the packages):
    it reads back the same."""

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
        """The flat mapping stored before the facts were typed: a fact's key is its field's name spelt with
        a space (``torch from``); every other key is a package."""
        if not isinstance(data, dict) or isinstance(data.get("packages"), dict):
            return data
        given = {k: v for k, v in data.items() if v not in (None, "", {})}
        fields = {k.replace(" ", "_"): v for k, v in given.items() if k.replace(" ", "_") in cls.facts()}
        return {**fields, "packages": {k: str(v) for k, v in given.items() if k.replace(" ", "_") not in fields}}

    @model_serializer(mode="wrap")
    def _known(self, handler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}

    @classmethod
    def facts(cls) -> list[str]:
        """The fields that are facts (every field but ``packages``), in the order reports show them."""
        return [name for name in cls.model_fields if name != "packages"]

    def installed(self) -> dict[str, str]:
        """What the environment held as packages (name -> version): torch, then every other package."""
        return {**({"torch": self.torch} if self.torch else {}), **self.packages}

    @property
    def device(self) -> Optional[str]:
        """The GPU, else the CPU it measured on."""
        return self.gpu or self.cpu

    def __bool__(self) -> bool:
        return bool(self.packages) or any(getattr(self, name) for name in self.facts())


class RunEnvironment(PointEnv):
    """A bisect's environment as a whole: the boundary's facts (one value where last good and first bad
    agree, both where they differ), the OS of the machine that assembled the result, and the env spec with
    its torch base."""

    os: Optional[str] = None
    env_spec: Optional[str] = None
    env_base: Optional[str] = None


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
        value = f" value={human_value(self.value, self.metric)}" if self.value is not None else ""
        repeats = f" repeats={self.repeats}" if self.repeats != 1 else ""
        reason = f" # {self.reason}" if self.reason else ""
        return f"{self.verdict} {self.phase} {self.candidate}{value}{repeats} ({self.seconds:.1f}s){reason}"
