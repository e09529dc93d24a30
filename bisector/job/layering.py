"""A job's settings as read and layered: a TOML file (bounded, shape-checked), the flags merged on top (a
probe kind or a criterion rule given as a flag replaces the file's), and validation errors as one line that
names the source and the key."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from pydantic import BaseModel, ValidationError

from bisector.errors import SHOWN_CHARS, OwnListError, UsageError, cut
from bisector.safety import safe_toml
from bisector.job.probe import KINDS, is_program


def job_loc(loc: tuple) -> tuple:
    """A validation error's location as the job's keys: a probe's kind (the union's tag) is not one of them."""
    return tuple(p for i, p in enumerate(loc) if not (p in KINDS and (i == 0 or loc[i - 1] == "probe")))


def _location(error: dict) -> str:
    return ".".join(cut(p) for p in job_loc(error["loc"])) or "(top level)"


def validation_message(source: str, exc: ValidationError, errors: Optional[list] = None) -> str:
    """One line: the file, the key and what is wrong (foreign keys and values cut short); ``errors``:
    those of ``exc``'s errors to tell (default: all)."""
    errors = exc.errors() if errors is None else errors
    err = errors[0]
    msg = err["msg"].removeprefix("Value error, ")
    if not isinstance((err.get("ctx") or {}).get("error"), OwnListError):
        msg = cut(msg, 4 * SHOWN_CHARS)
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{source}: {_location(err)}: {msg}{more}"


TOML_MAX_BYTES = 1 << 20   # a job file is a page of settings; /dev/zero or a stray log is not one
def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file's tables; UsageError (one line) when it is missing, not a regular file, over 1 MiB,
    of a shape no job file has (bisector.safety.safe_toml), or not TOML."""
    path = Path(path).expanduser()
    try:
        if not path.exists():
            raise UsageError(f"{path}: file not found")
        if not path.is_file():
            raise UsageError(f"{path}: not a regular file")
        with path.open("rb") as fh:
            data = fh.read(TOML_MAX_BYTES + 1)
        if len(data) > TOML_MAX_BYTES:
            raise UsageError(f"{path}: larger than {TOML_MAX_BYTES >> 20} MiB: not a job file")
        text = data.decode("utf-8")
        return safe_toml.loads(text)   # refused by its shape first: dotted keys, nesting, long numbers
    except safe_toml.TomlShapeError as exc:
        raise UsageError(f"{path}: not a job file: {exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid TOML: {str(exc).splitlines()[0][:200]}") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None


def merge(base: dict, overrides: dict) -> dict:
    """Deep-merge ``overrides`` (CLI flags, None meaning 'not given') into ``base``."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict):
            merged = merge(out.get(key, {}) if isinstance(out.get(key), dict) else {}, value)
            if merged or key in out:
                out[key] = merged
        elif value is not None:
            out[key] = value
    return out


EXCLUSIVE = {"probe": ("name", "path", "cmd", "command"), "criterion": ("threshold", "max_increase", "max_change", "auto")}
M = TypeVar("M", bound=BaseModel)


def layer(raw: dict, overrides: dict) -> dict:
    """``overrides`` (CLI flags) merged into ``raw`` (the file): a probe kind or a criterion rule chosen on
    the command line replaces the file's choice, not joins it (for ``run`` and ``matrix`` alike)."""
    data = merge(raw, overrides)
    for section, keys in EXCLUSIVE.items():
        given = overrides.get(section) or {}
        table = data.get(section)
        if isinstance(table, dict) and any(given.get(k) is not None for k in keys):
            data[section] = {k: v for k, v in table.items() if k not in keys or given.get(k) is not None}
    probe = data.get("probe")
    if isinstance(probe, dict) and is_program(overrides.get("probe")):
        probe.pop("args", None)   # the file's probe arguments were for the probe the command replaces
    return data


def validated(model: type[M] | Callable[[Any], M], data: dict, source: str) -> M:
    """``data`` as ``model`` (a model, or a function parsing to one: a probe's kind, bisector.job.probe.probe_from);
    errors are one line naming the source, the key and the problem."""
    try:
        return getattr(model, "model_validate", model)(data)
    except ValidationError as exc:
        raise UsageError(validation_message(source, exc)) from None
