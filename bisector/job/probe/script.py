"""A user's probe script (``--probe PATH``): Python writing ``{"metrics": {...}}`` to $BISECTOR_RESULT."""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import model_validator

from bisector.errors import UsageError
from bisector.job.probe.base import ProbeBase


class ScriptProbe(ProbeBase):
    """``path``: a probe script of the user's, run with ``args`` by the candidate environment's Python."""

    kind: ClassVar[str] = "script"
    kind_label: ClassVar[str] = "script"

    path: Path

    @model_validator(mode="after")
    def _path_expanded(self) -> "ScriptProbe":
        if str(self.path).startswith("~"):
            self.path = self.path.expanduser()   # (a stored config holds the home directory as ~)
        return self

    def script(self) -> Path:
        path = Path(self.path).expanduser().resolve()
        if not path.is_file():
            raise UsageError(f"probe script {self.path} not found")
        return path

    def files(self) -> list[tuple[str, Path]]:
        script = self.script()
        return [(script.name, script)]

    def check(self, device: str) -> None:
        self.script()

    def argv(self, python: Path) -> list[str]:
        return [str(python), str(self.script()), *self.args]

    def label(self) -> str:
        return str(self.path)

    def short_label(self) -> str:
        return Path(self.path).name

    def flag_words(self) -> list[str]:
        return ["--probe", str(self.path)]

    def relocated(self, script: Path) -> ProbeBase:
        return self.model_copy(update={"path": script})
