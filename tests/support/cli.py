"""This checkout's ``bisector`` as a child process, wherever the tests run from."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bisector(*argv: str, cwd: Path, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m bisector ARGV`` in ``cwd`` with this checkout first on ``PYTHONPATH`` (plus ``env``)."""
    return subprocess.run([sys.executable, "-m", "bisector", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
