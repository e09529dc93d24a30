"""What a probe printed (for your program: what the program printed), kept and shown.

Every measurement keeps the last ``KEPT_LINES`` lines of each stream (``details.output``; the store redacts it
like every text it keeps); ``bisector -v`` shows each line as it comes, prefixed with the candidate and the
stream so it is never mixed into bisector's own lines; a failed step shows its last ``SHOWN_ON_FAILURE`` lines
(:func:`failure_lines`); ``bisector log RUN --output STEP`` prints them all.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

from bisector.process.procs import Completed

KEPT_LINES = 200
SHOWN_ON_FAILURE = 20
OUTPUT_LOGGER = "bisector.output"   # -v turns it on (bisector.cli.main); its lines are the program's


def kept(done: Completed) -> dict[str, list[str]]:
    """The last lines of each stream of a finished probe (streams that printed nothing left out)."""
    out = {}
    for name, text in (("stdout", done.stdout_tail), ("stderr", done.stderr_tail)):
        lines = text.splitlines()[-KEPT_LINES:]
        if lines:
            out[name] = lines
    return out


def echo(label: str) -> Optional[Callable[[str, str], None]]:
    """Where each line goes as it comes while ``-v`` is on (None otherwise: nothing is done per line)."""
    log = logging.getLogger(OUTPUT_LOGGER)
    if not log.isEnabledFor(logging.INFO):
        return None
    return lambda stream, line: log.info("  %s %s| %s", label, "!" if stream == "stderr" else " ", line)


def failure_lines(details: dict) -> list[str]:
    """The last lines a failed run printed, as a failed step shows them: its stderr, else its stdout."""
    output = (details or {}).get("output") or {}
    lines = output.get("stderr") or output.get("stdout") or []
    return [str(line) for line in lines[-SHOWN_ON_FAILURE:]]
