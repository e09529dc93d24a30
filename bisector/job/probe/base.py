"""What every probe kind shares: its fields, the protocol the rest of bisector calls, and the stored shape.

A probe is one of four kinds (one class each, beside this module): a built-in probe (``builtin``), a user's
probe script (``script``), a command judged by its exit code (``exit_code``) and a user's own program run
under the command meter (``program``). Code outside this package never asks which kind it holds: it calls the
protocol below. The stored shape is the one job files, flags and stored runs have always used (the keys
``name``, ``path``, ``cmd``, ``command``...): a validator takes it in, the serializer writes it back key for key,
so a job's ``config_hash`` is what it was before the kinds were classes.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, ClassVar, Optional

from pydantic import BaseModel, ConfigDict, model_serializer, model_validator

from bisector.core.measurement import Measurement
from bisector.core.strict_numbers import numbers

# every key of the stored shape, in its order, with its value when a kind does not use it
LEGACY_KEYS: dict[str, Any] = {"name": None, "path": None, "cmd": None, "command": [], "measure_skip": 1,
                               "meter": "tensors", "cwd": None, "args": [], "timeout": 1800.0}
OPTIONAL_KEYS: dict[str, Any] = {"fake": False}   # keys of the stored shape written only where set (old hashes stay)
KIND_KEYS = ("name", "path", "cmd", "command")
ONE_KIND = "give exactly one of name, path, cmd, command"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
PROGRAM_ONLY = ("--measure-skip, --meter and --fake (measure_skip, meter, fake) are for a program given after -- (or "
                "as [probe] command = [...])")


class ProbeBase(BaseModel):
    """The fields every kind has (``args``, ``timeout``, ``cwd``) and the protocol (overridden per kind)."""

    model_config = ConfigDict(extra="forbid")

    kind: ClassVar[str] = ""                 # the kind's tag (what the discriminator answers)
    kind_label: ClassVar[str] = ""           # how a report names the kind
    judged_by_exit_code: ClassVar[bool] = False   # 0 GOOD, 125 SKIP, 1-127 BAD (git bisect run's contract)
    warm_capable: ClassVar[bool] = False     # may fork from a warm worker (bisector.measure.warm_pool)
    metric_without_rule: ClassVar[bool] = False   # a criterion with no rule still reads default_metric
    repro_kind: ClassVar[str] = "probe"      # the repro script it gets (bisector/data/repro/<kind>_repro.py)

    cwd: Optional[Path] = None
    args: list[str] = []
    timeout: float = 1800.0
    env: dict[str, str] = {}   # variables the probe runs with, over the environment's (a diff side's, say)

    _numbers = numbers("timeout")

    @model_validator(mode="before")
    @classmethod
    def _stored_shape(cls, data):
        """The stored shape in: the keys of other kinds dropped where they hold nothing, refused where they
        hold something (one kind per probe)."""
        if not isinstance(data, dict):
            return data
        out = {}
        for key, value in data.items():
            if key in LEGACY_KEYS and key not in cls.model_fields:
                if value in (None, [], "", LEGACY_KEYS[key]) or (key == "name" and value == cls._stored_name()):
                    continue
                given = [k for k in KIND_KEYS if data.get(k)]
                raise ValueError(PROGRAM_ONLY if key in ("measure_skip", "meter") else
                                 ONE_KIND + (f" (got {', '.join(given)})" if len(given) > 1 else ""))
            if key in OPTIONAL_KEYS and key not in cls.model_fields:
                if value in (None, OPTIONAL_KEYS[key]):
                    continue
                raise ValueError(PROGRAM_ONLY)
            out[key] = value
        return out

    @model_validator(mode="after")
    def _positive_timeout(self):
        if self.timeout <= 0:
            raise ValueError("timeout must be positive")
        bad = next((k for k in self.env if not _ENV_NAME.match(k)), None)
        if bad is not None:
            raise ValueError(f"{bad[:40]!r} is not an environment variable's name (letters, digits, _)")
        return self

    @model_serializer(mode="wrap")
    def _as_stored(self, handler):
        """Written back in the stored shape, every key in its place (what ``config_hash`` hashes)."""
        mine = handler(self)
        out = {key: mine.get(key, default) for key, default in LEGACY_KEYS.items()}
        if self._stored_name() is not None:
            out["name"] = self._stored_name()
        if self.env:   # only where given: a job without it keeps the shape (and hash) it always had
            out["env"] = mine["env"]
        out.update({k: mine[k] for k, unset in OPTIONAL_KEYS.items() if mine.get(k, unset) != unset})
        return out

    @classmethod
    def _stored_name(cls) -> Optional[str]:
        """The ``name`` the stored shape gives this kind where it has none of its own."""
        return None

    # -- the protocol ------------------------------------------------------------------------------------
    def script(self) -> Optional[Path]:
        """The Python script the probe runs, checked to exist (None: it runs no script of ours)."""
        return None

    def files(self) -> list[tuple[str, Path]]:
        """The code the probe's output depends on: (label, path) pairs, hashed by :meth:`fingerprint`,
        shipped to a Ray node, embedded in a repro."""
        return []

    def argv(self, python: Path) -> list[str]:
        """The command run inside the environment (an argument list, never a shell)."""
        raise NotImplementedError

    def label(self) -> str:
        """How reports name the probe."""
        raise NotImplementedError

    def short_label(self) -> str:
        """The label where space is short (a matrix page): a script by its file name."""
        return self.label()

    def check(self, device: str) -> None:
        """Everything about the probe that can be known before a run (a UsageError otherwise)."""

    def settle(self) -> None:
        """Fix what the probe takes from where bisector runs, so the stored job holds it (a program's directory)."""

    @property
    def workdir(self) -> Optional[Path]:
        """Where the probe runs (None: a scratch directory)."""
        return Path(self.cwd).expanduser() if self.cwd is not None else None

    @property
    def default_metric(self) -> Optional[str]:
        """The metric a criterion reads when the job names none (None: the kind has no default)."""
        return None

    def known_metric(self, name: Optional[str]) -> Optional[str]:
        """Why ``name`` is not a metric this probe gives (one line), or None when it may be one."""
        return None

    def computed_number(self, name: Optional[str]) -> bool:
        """Whether metric ``name`` is a number the program computes (a loss: no direction is worse by itself)."""
        return False

    def bad_input(self, m: Measurement) -> Optional[str]:
        """One line when a measurement shows the job's settings were bad input (known only once it ran)."""
        return None

    def fingerprint(self) -> str:
        """Hash of what determines the probe's output: its code and its arguments."""
        h = hashlib.sha256()
        h.update(json.dumps({"cmd": self._fingerprinted_cmd(), "args": self.args}).encode())
        if self.env:
            h.update(json.dumps({"env": self.env}, sort_keys=True).encode())
        self._fingerprint_more(h)
        for label, path in self.files():
            h.update(label.encode() + b"\0" + path.read_bytes())
        return h.hexdigest()[:16]

    def _fingerprinted_cmd(self) -> Optional[str]:
        return None

    def _fingerprint_more(self, h) -> None:
        """What else a kind's output depends on (a program's words and the files they name)."""

    def flag_words(self) -> list[str]:
        """The ``bisector run`` flags that choose this probe (bisector.job.argv writes a job as its command)."""
        raise NotImplementedError

    def program(self) -> list[str]:
        """The user's program and its arguments (what followed ``--``), else nothing."""
        return []

    def program_words(self) -> list[str]:
        """What follows ``--`` on that command line (a user's program), else nothing."""
        return ["--", *self.program()] if self.program() else []

    def with_args(self, extra: list[str], env: Optional[dict[str, str]] = None) -> "ProbeBase":
        """The same probe with ``extra`` arguments after its own and ``env`` over its variables (a diff side's)."""
        return self.model_copy(update={"args": [*self.args, *extra], "env": {**self.env, **(env or {})}})

    def relocated(self, script: Path) -> "ProbeBase":
        """The same probe running ``script`` (its files shipped elsewhere, as a Ray node writes them)."""
        return self
