"""Helpers for the Ray tests: a real local Ray on loopback, and what the hold probe logged."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

PROBES = Path(__file__).resolve().parent.parent / "probes"
HOLD = PROBES / "hold.py"


def loopback() -> None:
    """Keep Ray's nodes on 127.0.0.1 (tests never talk to another address)."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"


def events(log: Path) -> list[dict]:
    """The hold probe's log lines (missing log: none)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def wait_for(predicate, timeout: float = 120.0, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def parent_of(pid: int) -> int:
    """The parent of process ``pid`` (a probe's parent is its launcher; the launcher's, the Ray worker)."""
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def commit_args(repo: Path, shas: list[str], store: Path, cache: Path, spec: Path, *extra: str) -> list[str]:
    """`bisector run` over the generated repo's commits with the hold probe (no hold)."""
    return ["run", "--package", "tinypkg", "--mode", "commits", "--repo", str(repo), "--good", shas[0],
            "--bad", shas[-1], "--env", str(spec), "--store", str(store), "--cache-dir", str(cache),
            "--metric", "buffer_kib", "--threshold", "200", "--json", *extra]
