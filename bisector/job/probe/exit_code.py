"""A command judged by its exit code (``--probe-cmd``): 0 good, 125 skip, other 1-127 bad."""
from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import ClassVar, Optional

from bisector.errors import UsageError
from bisector.job.probe.base import ProbeBase

SHELL_OPERATORS = set("();<>|&")


def _words(cmd: str) -> list[str]:
    try:
        words = shlex.split(cmd)
    except ValueError as exc:
        raise UsageError(f"--probe-cmd cannot be parsed: {exc}") from None
    if not words:
        raise UsageError("--probe-cmd is empty")
    return words


class ExitCodeProbe(ProbeBase):
    """``cmd``: a command line (split as a shell would, run without one) whose exit code is the verdict."""

    kind: ClassVar[str] = "exit_code"
    kind_label: ClassVar[str] = "exit-code command"
    judged_by_exit_code: ClassVar[bool] = True
    repro_kind: ClassVar[str] = "exit_code"

    cmd: str

    def check(self, device: str) -> None:
        """The command parses, has no shell syntax and names a program that can exist."""
        lexer = shlex.shlex(self.cmd, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError as exc:
            raise UsageError(f"--probe-cmd cannot be parsed: {exc}") from None
        if not tokens:
            raise UsageError("--probe-cmd is empty")
        operator = next((w for w in tokens if set(w) <= SHELL_OPERATORS), None)
        if operator is not None:
            raise UsageError(f"--probe-cmd {self.cmd!r} has shell syntax ({operator!r}), but it runs without a shell: "
                             f"--probe-cmd \"sh -c '...'\" runs one")
        program = _words(self.cmd)[0]
        if "/" in program and not os.path.isabs(program):
            raise UsageError(f"--probe-cmd runs in a scratch directory: give {program} as an absolute path")
        if os.path.isabs(program) and not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise UsageError(f"--probe-cmd: {program} is not an executable file")

    def argv(self, python: Path) -> list[str]:
        return [*_words(self.cmd), *self.args]

    def label(self) -> str:
        return f"{self.kind_label}: {self.cmd}"

    def _fingerprinted_cmd(self) -> Optional[str]:
        return self.cmd

    def flag_words(self) -> list[str]:
        return ["--probe-cmd", self.cmd]
