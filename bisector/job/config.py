"""The bisect job as pydantic models (``bisect.toml``'s tables); reading and layering them: job.layering."""
from __future__ import annotations

import enum
import os
import re
from pathlib import Path
from typing import Any, Optional

from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict, field_serializer, field_validator, model_validator

from bisector.core.criterion import Compare, Criterion
from bisector.core.strict_numbers import numbers
from bisector.core.requirements import TORCH, Pin, as_pin, check_urls, valid_torch_choice
from bisector.errors import OwnListError, cut
from bisector.core.default_rule import with_default_rule
from bisector.job.metric_default import with_default_metric
from bisector.job.probe import BuiltinProbe, Probe


class ExecutorKind(enum.StrEnum):
    """Where measurements run (``--executor``, ``[run] executor``)."""

    LOCAL = "local"
    RAY = "ray"


class Mode(enum.StrEnum):
    """What the candidates are."""

    RELEASES = "releases"
    NIGHTLIES = "nightlies"   # torch's dated nightly wheels from the nightly index (good/bad: days or versions)
    COMMITS = "commits"
    AUTO = "auto"


TORCH_COMMITS = ("torch is bisected by release, then by nightly (each one becomes the shared base); building torch "
                 "commits from source takes hours: use --mode releases, or --mode nightlies with --nightly-index "
                 "(the answer is then the commit range between two nightlies)")


class JobSection(BaseModel):
    """``[job]``: what to bisect."""

    model_config = ConfigDict(extra="forbid")

    package: str
    good: str
    bad: str
    mode: Mode = Mode.AUTO
    repo: Optional[str] = None
    repo_url: Optional[str] = None
    pre: bool = False
    first_parent: bool = True
    find_fix: bool = False
    widen: bool = False
    env: str = "default"
    pins: list[Pin] = []            # --with PKG==VERSION: exact companions over the env spec
    index_url: Optional[str] = None
    nightly_index: Optional[str] = None   # torch: the index of its nightly wheels (auto mode goes on to them)
    attribute: bool = True          # when companions moved too, find which change explains the step
    follow: Optional[bool] = None   # bisect the companion that explains it (None: yes, when it is one)
    follow_repo: Optional[str] = None   # the companion's repository, for its commits
    confirm_revert: bool = True     # revert a commit culprit on the bad end and measure it
    clone: bool = False             # auto mode may clone the repository the package's metadata names

    @field_validator("pins", mode="before")
    @classmethod
    def _typed_pins(cls, value: Any) -> Any:
        """Pins given as ``name==version`` (flags, bisect.toml, a stored job) are typed pairs from here on."""
        return [as_pin(x) for x in value] if isinstance(value, list) else value

    @field_validator("pins")
    @classmethod
    def _exact_pins(cls, value: list[Pin]) -> list[Pin]:
        seen: dict[str, Pin] = {}
        for pin in value:
            key = canonicalize_name(pin.name)
            if key in seen and seen[key].version != pin.version:
                raise ValueError(f"{cut(str(seen[key]))} and {cut(str(pin))} pin {key} twice: give one version")
            seen.setdefault(key, pin)
        return value

    @field_serializer("pins")
    def _pin_words(self, value: list[Pin]) -> list[str]:
        return [str(pin) for pin in value]   # as the flags give them (a job's config hash stays what it was)

    @field_validator("package")
    @classmethod
    def _pep508_name(cls, value: str) -> str:
        if len(value) > 200 or not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", value):   # (no index
            raise ValueError(f"'{cut(value)}' is not a valid package name (PEP 508)")   # is asked for a 100 KB name)
        return canonicalize_name(value)

    @field_validator("repo_url")
    @classmethod
    def _https(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
            raise ValueError("must be an http(s) URL of the repository's web page")
        return value

    @field_validator("index_url", "nightly_index")
    @classmethod
    def _index(cls, value: Optional[str]) -> Optional[str]:
        return check_urls(value)

    @field_validator("repo", "follow_repo", "env")
    @classmethod
    def _home(cls, value: Optional[str]) -> Optional[str]:
        """A local path given (or stored, the home directory redacted) as ~/... is the same path."""
        return os.path.expanduser(value) if value and value.startswith("~") else value

    @field_validator("good", "bad")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()

    def mode_problem(self) -> Optional[str]:
        """Why the mode cannot bisect this package (None when it can): torch is never bisected by commit,
        commits come from a repository, nightlies are torch's. The one statement of these rules (a bisect's
        preflight and its driver both ask)."""
        torch = canonicalize_name(self.package) == TORCH
        if self.mode is Mode.COMMITS and torch:
            return TORCH_COMMITS
        if self.mode is Mode.COMMITS and not self.repo:
            return "--mode commits needs --repo (a local path or a git URL)"
        if self.mode is Mode.NIGHTLIES and not torch:
            return f"--mode nightlies is torch's (nightly wheels from --nightly-index), not {self.package}'s"
        return None


MAX_JOBS = 1024
RAY_ADDRESS = re.compile(r"(?:ray://)?(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})")


class RunSection(BaseModel):
    """``[run]``: how to run it."""

    model_config = ConfigDict(extra="forbid")
    _numbers = numbers("jobs")

    jobs: int = 1
    prefetch: Optional[bool] = None
    warm: bool = True                             # built-in probes fork from a warm worker per environment
    store: Optional[Path] = None
    cache_dir: Optional[Path] = None
    env_backend: Optional[str] = None
    executor: ExecutorKind = ExecutorKind.LOCAL   # where measurements run: local threads, or Ray tasks
    ray_address: Optional[str] = None             # with executor "ray": a cluster address or "auto"

    @field_validator("jobs")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be at least 1")
        if value > MAX_JOBS:
            raise ValueError(f"must be at most {MAX_JOBS}")
        return value

    @field_validator("store", "cache_dir")
    @classmethod
    def _expanded(cls, value: Optional[Path]) -> Optional[Path]:
        return value.expanduser() if value is not None else None

    @field_validator("ray_address")
    @classmethod
    def _address(cls, value: Optional[str]) -> Optional[str]:
        if value is None or value in ("auto", "local"):
            return value
        match = RAY_ADDRESS.fullmatch(value)
        if not match or not 0 < int(match.group(1)) < 65536:
            raise ValueError(f"{value!r} is not a Ray address: auto, HOST:PORT or ray://HOST:PORT")
        return value

    @model_validator(mode="after")
    def _ray_address_needs_ray(self) -> "RunSection":
        if self.ray_address is not None and self.executor is not ExecutorKind.RAY:
            raise ValueError('ray_address is only used with executor = "ray" (--executor ray)')
        return self


class ReferenceSection(BaseModel):
    """``[reference]``: what the upstream report this job answers measured, shown beside our numbers
    only in a run it is about (bisector.job.jobfile: the report's ``package``, a range holding its
    ``version``, and the ``probe`` with the ``args`` it was written for, by default the probe of the
    job file that gives it)."""

    model_config = ConfigDict(extra="forbid")

    title: str
    package: str
    version: str
    setting: str
    measured_with: str = ""
    url: Optional[str] = None
    values: dict[str, float] = {}   # metric name -> what the report measured
    probe: Optional[str] = None         # the probe's label (its kind's label()) the report's setting is
    args: Optional[list[str]] = None    # and its arguments (as the probe reads them)

    @field_validator("package")
    @classmethod
    def _name(cls, value: str) -> str:
        return canonicalize_name(value)


class EnvSection(BaseModel):
    """``[env]``: what the candidate environments stand on. ``torch``: "current" (bisector's own
    interpreter's), a version (one base venv with it), or "per-candidate" (each environment its own)."""

    model_config = ConfigDict(extra="forbid")

    torch: Optional[str] = None

    @field_validator("torch")
    @classmethod
    def _choice(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else valid_torch_choice(value)


class ContrastSection(BaseModel):
    """``[contrast]``: another setting of the same probe (its ``args`` are added after the job's, so
    it differs only in what they name) measured at the range's endpoints, to show how a different
    setup sees the same versions."""

    model_config = ConfigDict(extra="forbid")

    label: str
    args: list[str]


class JobConfig(BaseModel):
    """A whole bisect job."""

    model_config = ConfigDict(extra="forbid")

    job: JobSection
    probe: Probe = BuiltinProbe(name="ga_memory")
    criterion: Criterion = Criterion()
    run: RunSection = RunSection()
    env: EnvSection = EnvSection()
    contrast: Optional[ContrastSection] = None
    reference: Optional[ReferenceSection] = None

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data):
        """No setting holds a NUL byte (it cannot reach a process argument or a file name), nor a byte that is
        not UTF-8 (a lone surrogate: no store, report or JSON document can hold it as it is)."""
        if _has(data, "\x00"):
            raise ValueError("a value holds a NUL byte (\\x00)")
        undecodable = _has(data, None)
        if undecodable:
            raise ValueError(f"a value holds a byte that is not UTF-8 ({undecodable!r}...): bisector keeps every "
                             "setting as text; name the file by a path of UTF-8 characters")
        return data

    @model_validator(mode="before")
    @classmethod
    def _probe_default_metric(cls, data):
        """A criterion that names no metric reads its probe's (a user's program: step_peak_bytes)."""
        return with_default_metric(data)

    @model_validator(mode="after")
    def _probe_metric(self) -> "JobConfig":
        """The metric is one the probe gives (where its kind knows them); what the probe takes from where bisector
        runs is fixed now (a program runs where bisector was started); a metric without a rule gets its unit's
        default rule (bisector.core.default_rule)."""
        problem = self.probe.known_metric(self.criterion.metric)
        if problem:
            raise OwnListError(problem)
        self.probe.settle()
        self.criterion = with_default_rule(self.criterion, self.probe.computed_number(self.criterion.metric))
        return self

    @model_validator(mode="after")
    def _stats_fits(self) -> "JobConfig":
        if self.criterion.compare is Compare.STATS:
            if self.probe.judged_by_exit_code:
                raise ValueError("criterion.compare = stats compares metric samples: an exit-code probe has none")
            if self.job.find_fix:
                raise ValueError("criterion.compare = stats looks for a regression from the good endpoint; "
                                 "find_fix is not supported with it")
        return self


_SURROGATE = re.compile("[\ud800-\udfff]")


def _has(data, char: Optional[str]):
    """Whether any string in ``data`` holds ``char`` (None: a lone surrogate; then the text up to it)."""
    if isinstance(data, str):
        if char is not None:
            return char in data
        found = _SURROGATE.search(data)
        return data[:found.end()][-20:].encode("utf-8", "backslashreplace").decode() if found else False
    items = [x for kv in data.items() for x in kv] if isinstance(data, dict) else \
        data if isinstance(data, (list, tuple)) else []
    return next((hit for hit in (_has(v, char) for v in items) if hit), False)
