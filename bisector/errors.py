"""Errors that the CLI turns into one clear line and an exit code."""
from __future__ import annotations


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
