"""Run a command bisector printed, exactly as printed: its words as a shell splits them, `bisector` being
this checkout's ``python -m bisector`` (the one command substituted, nothing added or dropped)."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from typing import Optional


def run_as_printed(command: str, env: Optional[dict] = None, timeout: float = 900) -> subprocess.CompletedProcess:
    words = shlex.split(command)
    assert words and words[0] == "bisector", f"not a bisector command: {command!r}"
    return subprocess.run([sys.executable, "-m", "bisector", *words[1:]], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
