"""Shared fixtures (a session-wide environment cache: real envs are reused across tests) and the tiers:
every test is marked by its folder, ``tests/unit`` (in-process, seconds in all), ``tests/process``
(real processes, git repositories and local indexes, no environment builds) and ``tests/slow`` (real
environments and probes). ``pytest tests/unit`` or ``-m unit`` runs one tier; ``-m "not slow"`` the
first two."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


TIERS = ("unit", "process", "slow")


def pytest_collection_modifyitems(config, items):
    """Mark each test with its folder's tier (a test outside the three folders is refused)."""
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        tier = parts[0] if len(parts) > 1 and parts[0] in TIERS else None
        if tier is None:
            raise pytest.UsageError(f"{item.nodeid}: every test lives in tests/unit, tests/process or tests/slow")
        item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def env_cache(tmp_path_factory) -> Path:
    """One environment cache for the whole test session (building envs is the slow part)."""
    return tmp_path_factory.mktemp("bisector-cache")


@pytest.fixture(scope="session")
def plain_spec(tmp_path_factory) -> Path:
    """An env spec with the running interpreter's torch as base and nothing else."""
    path = tmp_path_factory.mktemp("spec") / "plain.toml"
    path.write_text('name = "plain"\nbase = "current"\n')
    return path


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """Keep the user's real cache and store out of a test."""
    monkeypatch.setenv("BISECTOR_CACHE_DIR", str(tmp_path / "user-cache"))
    return tmp_path


@pytest.fixture(autouse=True)
def _run_outside_the_repo(tmp_path_factory, monkeypatch):
    """Run every test (and the bisector processes it starts) from an empty directory, so the
    repository's own bisect.toml is never picked up by accident."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
