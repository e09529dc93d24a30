"""What an environment is made of: the env spec (a .toml, built-in ones in envs/) and the
install target."""
from __future__ import annotations

import datetime as dt
import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal, Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from bisector.core.requirements import CURRENT, NO_BASE, TORCH, check_urls, parse_pin  # noqa: F401 (the spec's words)
from bisector.errors import UsageError


AS_OF_CANDIDATE = "as-of-candidate"
_NAME_RE = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
_ENV_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_REDIRECTING = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONNOUSERSITE")
_TORCH_BASE_RE = re.compile(r"^torch==(?P<version>[^\s;@]+)$")


def valid_package_name(name: str) -> str:
    """Return the canonical form of a PEP 508 distribution name, or raise ValueError."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"invalid package name {name!r}")
    return canonicalize_name(name)


def valid_sha(sha: str) -> str:
    """Return a full 40-hex commit SHA (lower case), or raise ValueError."""
    if not isinstance(sha, str) or not _SHA_RE.match(sha.lower()):
        raise ValueError(f"not a full 40-hex commit SHA: {sha!r}")
    return sha.lower()



def companion_requirement(name: str, value: str) -> tuple[str, bool]:
    """Turn a companions entry into (PEP 508 requirement, pinned?).

    "as-of-candidate" -> unpinned (resolved as of the candidate's date); "4.32.1" or
    "==4.32.1" -> pinned exactly (installs even if uploaded after that date); any other
    specifier set (">=4.30,<4.35") -> resolved as of the date within that range.
    """
    valid_package_name(name)
    value = value.strip()
    if value == AS_OF_CANDIDATE:
        return name, False
    try:
        Version(value)
        value = f"=={value}"
    except ValueError:   # InvalidVersion, or a number past Python's int-string limit
        pass
    try:
        spec = SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f"{value!r} is neither {AS_OF_CANDIDATE!r}, a version nor a specifier") from None
    items = list(spec)
    pinned = len(items) == 1 and items[0].operator in ("==", "===") and "*" not in items[0].version
    return f"{name}{spec}", pinned



def _check_name(value: str) -> str:
    valid_package_name(value)
    return value


def _check_pin(value: str) -> str:
    companion_requirement("x", value)
    return value


def _check_requirement(value: str) -> str:
    try:
        Requirement(value)
    except InvalidRequirement as exc:
        first = str(exc).splitlines()[0]
        raise ValueError(f"{value!r} is not a PEP 508 requirement ({first})") from None
    return value


PackageName = Annotated[str, AfterValidator(_check_name)]
CompanionPin = Annotated[str, AfterValidator(_check_pin)]
Requirement508 = Annotated[str, AfterValidator(_check_requirement)]


class EnvSpec(BaseModel):
    """How candidate environments are made: base, companions, extra requirements, index.

    Loaded from ``<name>.toml`` by :func:`load_env_spec`. ``base`` is "current" (this
    interpreter's torch), a path to an existing env/prefix, "torch==X.Y.Z" (a base venv
    with that torch, built once with pip and cached), or "none" (no shared torch: each
    environment resolves its own, as of its candidate's date). Everything the base provides
    beyond torch's own dependency closure stays invisible to candidates.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    python: Optional[str] = None
    base: str = "current"
    companions: dict[PackageName, CompanionPin] = {}
    requirements: list[Requirement508] = []
    index_url: Optional[str] = None
    extra_index_urls: list[str] = []
    env_vars: dict[str, str] = {}
    backend: Literal["uv", "virtualenv"] = "uv"

    @field_validator("base")
    @classmethod
    def _base(cls, value: str) -> str:
        value = value.strip()
        if re.match(r"^torch\s*==", value):
            value = re.sub(r"\s+", "", value)
            match = _TORCH_BASE_RE.match(value)
            if not match:
                raise ValueError("a torch base is written torch==X.Y.Z")
            Version(match["version"])
        elif not value:
            raise ValueError("empty base")
        return value

    @field_validator("index_url", "extra_index_urls")
    @classmethod
    def _urls(cls, value):
        return check_urls(value)

    @field_validator("env_vars")
    @classmethod
    def _env_vars(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not _ENV_VAR_RE.match(k)]
        if bad:
            raise ValueError(f"invalid variable name {bad[0]!r}")
        redirecting = sorted(set(value) & set(_REDIRECTING))
        if redirecting:
            raise ValueError(f"{redirecting[0]} would redirect imports away from the candidate env")
        return value

    @property
    def torch_base_version(self) -> Optional[str]:
        """X.Y.Z for a "torch==X.Y.Z" base, else None."""
        match = _TORCH_BASE_RE.match(self.base)
        return match["version"] if match else None

    def over(self, companions: dict[str, str], index_url: Optional[str] = None, drop: tuple[str, ...] = ()) -> "EnvSpec":
        """This spec with ``companions`` (name -> "==X", a specifier or "as-of-candidate") laid over its
        own entries of those names, and the entries named in ``drop`` removed; a torch entry becomes the
        base (``torch==X``, its index the spec's or ``index_url``), since torch is never a companion."""
        laid = {k: v for k, v in companions.items() if canonicalize_name(k) != TORCH}
        names = {canonicalize_name(n) for n in (*companions, *drop)}
        kept = {k: v for k, v in self.companions.items() if canonicalize_name(k) not in names}
        update: dict = {"companions": {**kept, **laid}}
        torch = next((v for k, v in companions.items() if canonicalize_name(k) == TORCH), None)
        if torch is not None:
            update.update(base=f"torch=={torch.strip().lstrip('=').strip()}", index_url=self.index_url or index_url)
        return self.model_copy(update=update)

    def companion_requirements(self) -> list[tuple[str, bool]]:
        """(requirement, pinned?) for each companion, sorted by name."""
        return [companion_requirement(n, v) for n, v in sorted(self.companions.items())]


class InstallTarget(BaseModel):
    """Exactly one candidate to install: a release from the index or a commit from a repo.

    ``revert`` (commits only): a commit whose change (against its first parent) is reverted on top of
    ``revision``; the environment then holds that reverted tree, stamped as :attr:`stamp`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    package: str
    version: Optional[str] = None
    source: Optional[Path] = None
    revision: Optional[str] = None
    as_of: Optional[dt.datetime] = None
    index_url: Optional[str] = None
    revert: Optional[str] = None

    @field_validator("package")
    @classmethod
    def _package(cls, value: str) -> str:
        valid_package_name(value)
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: Optional[str]) -> Optional[str]:
        if value is not None:
            Version(value)
        return value

    @field_validator("index_url")
    @classmethod
    def _index_url(cls, value: Optional[str]) -> Optional[str]:
        return check_urls(value)

    @field_validator("revision", "revert")
    @classmethod
    def _revision(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else valid_sha(value)

    @field_validator("as_of")
    @classmethod
    def _as_of(cls, value: Optional[dt.datetime]) -> Optional[dt.datetime]:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> "InstallTarget":
        if (self.version is None) == (self.source is None):
            raise ValueError("give either version (a release) or source + revision (a commit)")
        if (self.source is None) != (self.revision is None):
            raise ValueError("a commit target needs both source and revision")
        if self.revert is not None and self.revision is None:
            raise ValueError("only a commit target can revert another commit")
        return self

    @property
    def canonical_name(self) -> str:
        """The canonical distribution name."""
        return canonicalize_name(self.package)

    @property
    def is_commit(self) -> bool:
        """True for a commit target."""
        return self.revision is not None

    @property
    def ref(self) -> str:
        """The version, or the first 10 characters of the SHA (and of the reverted commit's)."""
        if not self.revision:
            return str(self.version)
        return self.revision[:10] + (f"-revert-{self.revert[:10]}" if self.revert else "")

    @property
    def stamp(self) -> Optional[str]:
        """The revision a commit's wheel records: the SHA, or '<sha>-revert-<culprit sha>'."""
        if not self.revision:
            return None
        return self.revision + (f"-revert-{self.revert}" if self.revert else "")


def _spec_path(name_or_path: str, search_dir: Path) -> Path:
    candidate = Path(os.path.expanduser(name_or_path))
    if candidate.suffix == ".toml" or os.sep in name_or_path:
        return candidate
    return Path(search_dir) / f"{name_or_path}.toml"


def _error_line(path: Path, exc: ValidationError) -> str:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    message = " ".join(err["msg"].removeprefix("Value error, ").split())
    if err["type"] == "extra_forbidden":
        message = "unknown key"
    return f"{path}: key '{key}': {message}"


def load_env_spec(name_or_path: str, search_dir: Path) -> EnvSpec:
    """Load ``<search_dir>/<name>.toml`` (or a .toml path); UsageError names file, key, problem."""
    path = _spec_path(name_or_path, search_dir)
    if not path.is_file():
        raise UsageError(f"env spec {name_or_path!r} not found (looked for {path})")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    data.setdefault("name", path.stem)
    base = data.get("base")
    if isinstance(base, str) and base not in (CURRENT, NO_BASE) and not re.match(r"^torch\s*==", base):
        data["base"] = str((path.parent / os.path.expanduser(base)).resolve())
    try:
        return EnvSpec.model_validate(data)
    except ValidationError as exc:
        raise UsageError(_error_line(path, exc)) from None
