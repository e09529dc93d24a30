"""Issue 34: without git on PATH, commands that need no git work (``--version``, ``--help``, ``runs``) and a
commit bisect says in one line that it needs git (it was a GitPython traceback for every command)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BATTERY = ["git: --version without git on PATH", "git: runs without git on PATH",   # counted by test_hostile.py
           "git: a commit bisect without git on PATH"]


def _bisector(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "BISECTOR_CACHE_DIR": str(tmp_path / "c")}
    return subprocess.run([sys.executable, "-m", "bisector", *argv], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)


def test_no_git_on_path(tmp_path):
    assert "git" not in os.listdir(tmp_path)   # (the PATH is an empty directory)
    done = _bisector(tmp_path, "--version")
    assert done.returncode == 0 and done.stdout.startswith("bisector "), done.stderr
    done = _bisector(tmp_path, "runs", "--store", str(tmp_path / "none.db"))
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    done = _bisector(tmp_path, "run", "--package", "tinypkg", "--mode", "commits", "--repo", str(tmp_path),
                     "--good", "a", "--bad", "b", "--probe-cmd", "true", "--store", str(tmp_path / "s.db"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("bisector: error: git is not on PATH: a commit bisect and --repo need it "
                                   "(install git, or bisect releases)")
    assert not (tmp_path / "s.db").exists()
