"""Running installer and interpreter subprocesses: argument lists only, short failure reasons."""
from __future__ import annotations

import logging
import os
import re
import subprocess
from pathlib import Path
from typing import Mapping, Optional, Sequence

from bisector.console import activity
from bisector.envs.model.environment import REDIRECTING_VARS
from bisector.errors import EnvironmentFailure
from bisector.process.procs import run_bounded

log = logging.getLogger("bisector.envs")

_NOISE = re.compile(
    r"^(WARNING: Location .* is ignored|Using Python .* environment at|hint:|note:|"
    r"\[notice\]|Looking in (indexes|links):|DEPRECATION:|[\^~]+$|File \".*\", line \d+)",
    re.IGNORECASE,
)
_DECOR = re.compile(r"^[\s×╰─▶│├└┬┴┼╭╮╯→|]+")
# where a resolver's explanation starts (uv's, then pip's): kept whole from there, its first "Because" first
_RESOLVER = re.compile(r"No solution found|conflicting dependencies|The conflict is caused by|ResolutionImpossible")


def clean_env(extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """os.environ without the variables that redirect imports, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in REDIRECTING_VARS}
    env.update(extra or {})
    return env


def short_reason(text: str, lines: int = 4, limit: int = 400) -> str:
    """The last meaningful lines of an installer's output, joined into one short line. A resolver's
    explanation is kept from its start (up to 1500 characters, cut at the end): its first clause names
    the packages in conflict, and a wrapped explanation runs longer than ``lines``."""
    kept = []
    for raw in text.splitlines():
        line = _DECOR.sub("", raw).strip()
        if line and not _NOISE.match(line):
            kept.append(line)
    start = next((i for i, line in enumerate(kept) if _RESOLVER.search(line)), None)
    if start is not None:
        reason, limit = " | ".join(kept[start:]), max(limit, 1500)
        return reason if len(reason) <= limit else reason[:limit - 3] + "..."
    reason = " | ".join(kept[-lines:]) or "no output"
    return reason if len(reason) <= limit else "..." + reason[-(limit - 3):]


def run(
    args: Sequence[str | Path],
    what: str,
    *,
    cwd: Optional[Path] = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: float = 1800,
) -> subprocess.CompletedProcess:
    """Run ``args`` (a list, never a shell) in its own process group; EnvironmentFailure
    ("<what>: <reason>") on failure. Ctrl-C / SIGTERM stop the whole group (bisector.process.procs)."""
    argv = [str(a) for a in args]
    log.debug("run: %s", argv)
    activity.update(what)
    try:
        done = run_bounded(argv, dict(env) if env is not None else None, cwd=cwd, timeout=timeout,
                           on_line=activity.line_updater())
    except FileNotFoundError:
        raise EnvironmentFailure(f"{what}: {argv[0]} not found") from None
    if done.timed_out:
        raise EnvironmentFailure(f"{what}: timed out after {timeout:.0f}s")
    if done.returncode != 0:
        raise EnvironmentFailure(f"{what}: {short_reason(done.stdout_tail + chr(10) + done.stderr_tail)}")
    return subprocess.CompletedProcess(argv, done.returncode, done.stdout_tail, done.stderr_tail)
