"""Errors that the CLI turns into one clear line and an exit code."""
from __future__ import annotations

from typing import Any

SHOWN_CHARS = 60   # an echoed key or value (a file's, a flag's) is cut to this many characters


def cut(text: Any, limit: int = SHOWN_CHARS) -> str:
    """``text`` as a string of at most about ``limit`` characters: a foreign key or value quoted in an error
    stays one short line however long it is."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


class OwnListError(ValueError):
    """A validator's message that lists only our own names (a command's metrics): shown whole, never cut."""


class BisectorError(Exception):
    """Base class: the message is shown to the user as one line."""

    exit_code = 1


class UsageError(BisectorError):
    """Bad input: CLI flags, config files, refs, versions (exit 2)."""

    exit_code = 2


class UndecidedError(BisectorError):
    """The bisect ran but could not reach an answer (exit 3)."""

    exit_code = 3


class EnvironmentFailure(BisectorError):
    """A candidate environment could not be built or failed its health check.

    Verdict-neutral: the candidate becomes SKIP with this message as the reason.
    """
