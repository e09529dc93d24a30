"""Which probe a bisect runs, how to launch it inside a candidate environment, and its fingerprint."""
from __future__ import annotations

import hashlib
import json
import os
import shlex
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, model_validator

from .errors import UsageError

PROBES_DIR = Path(os.environ.get("BISECTOR_PROBES_DIR") or Path(__file__).resolve().parent.parent / "probes")


class ProbeSpec(BaseModel):
    """Exactly one of: ``name`` (a built-in probe in probes/), ``path`` (a user's Python script
    writing ``{"metrics": ...}`` to $BISECTOR_RESULT) or ``cmd`` (exit-code contract:
    0 good, 125 skip, other 1-127 bad)."""

    model_config = ConfigDict(extra="forbid")

    name: Optional[str] = None
    path: Optional[Path] = None
    cmd: Optional[str] = None
    args: list[str] = []
    timeout: float = 1800.0

    @model_validator(mode="after")
    def _one_kind(self) -> "ProbeSpec":
        given = [k for k in ("name", "path", "cmd") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of name, path, cmd" + (f" (got {', '.join(given)})" if given else ""))
        if self.timeout <= 0:
            raise ValueError("timeout must be positive")
        return self

    @property
    def exit_code_mode(self) -> bool:
        return self.cmd is not None

    def script(self) -> Optional[Path]:
        """The Python script this probe runs, checked to exist."""
        if self.cmd is not None:
            return None
        if self.name is not None:
            path = PROBES_DIR / f"{self.name}.py"
            if "/" in self.name or not path.is_file():
                known = sorted(p.stem for p in PROBES_DIR.glob("[!_]*.py"))
                raise UsageError(f"unknown probe '{self.name}' (built-in probes: {', '.join(known) or 'none'})")
            return path
        path = Path(self.path).expanduser().resolve()
        if not path.is_file():
            raise UsageError(f"probe script {self.path} not found")
        return path

    def argv(self, python: Path) -> list[str]:
        """The command run inside the environment (argument list, never a shell)."""
        if self.cmd is not None:
            try:
                words = shlex.split(self.cmd)
            except ValueError as exc:
                raise UsageError(f"--probe-cmd cannot be parsed: {exc}") from None
            if not words:
                raise UsageError("--probe-cmd is empty")
            return [*words, *self.args]
        return [str(python), str(self.script()), *self.args]

    def fingerprint(self) -> str:
        """Hash of what determines the probe's output: its code (with sibling helpers) and arguments."""
        h = hashlib.sha256()
        h.update(json.dumps({"cmd": self.cmd, "args": self.args}).encode())
        script = self.script()
        if script is not None:
            files = [script]
            if self.name is not None:
                files += sorted(PROBES_DIR.glob("_*.py"))
            for f in files:
                h.update(f.name.encode() + b"\0" + f.read_bytes())
        return h.hexdigest()[:16]

    def label(self) -> str:
        if self.cmd is not None:
            return f"cmd: {self.cmd}"
        return self.name or str(self.path)
