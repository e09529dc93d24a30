"""Reliability with real processes: signals, concurrent runs, hostile input, nothing lost."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bisector.envs import EnvCache
from tests.support.gitfixture import make_repo

PROBES = Path(__file__).resolve().parent.parent / "probes"


@pytest.fixture(scope="module")
def repo8(tmp_path_factory):
    return make_repo(tmp_path_factory.mktemp("repo"), commits=8, bad_at=5)


def _args(repo, shas, store, cache, spec, *extra):
    return [sys.executable, "-m", "bisector", "run", "--package", "tinypkg", "--mode", "commits", "--repo",
            str(repo), "--good", shas[0], "--bad", shas[-1], "--probe", str(PROBES / "tiny_memory.py"),
            "--metric", "buffer_kib", "--threshold", "200", "--env", str(spec), "--store", str(store),
            "--cache-dir", str(cache), "--json", "--no-prefetch", *extra]


def _count(store: Path) -> int:
    return sqlite3.connect(store).execute("SELECT COUNT(*) FROM measurements").fetchone()[0]


def _gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` ends within ``within`` seconds (a loaded machine reaps it late)."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _wait_for(path: Path, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_probe_stops_fast_and_resumes(repo8, tmp_path, env_cache, plain_spec, sig):
    repo, shas = repo8
    store = tmp_path / "s.db"
    marker = tmp_path / "probe-started"
    env = {**os.environ, "TINY_PROBE_SLEEP": "60"}
    # the first probe sleeps 60 s; a wrapper writes its pid to the marker once it runs
    wrapper = tmp_path / "probe.py"
    wrapper.write_text(f"import pathlib, runpy\nimport os; pathlib.Path({str(marker)!r}).write_text(str(os.getpid()))\n"
                       f"runpy.run_path({str(PROBES / 'tiny_memory.py')!r}, run_name='__main__')\n")
    argv = _args(repo, shas, store, env_cache, plain_spec)
    argv[argv.index(str(PROBES / "tiny_memory.py"))] = str(wrapper)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    _wait_for(marker)
    start = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - start < 5, "did not stop within 5 s"
    assert proc.returncode == 130
    assert "Run the same command again to resume" in err and "Traceback" not in err
    assert _count(store) == 0  # the interrupted probe left no row
    assert _gone(int(marker.read_text()), within=10)  # the probe process is gone, not orphaned
    done = subprocess.run(argv, capture_output=True, text=True)
    out = json.loads(done.stdout)
    assert out["first_bad"]["sha"] == shas[5]
    assert _count(store) == out["probes_run"]


def test_two_runs_share_cache_and_store(repo8, tmp_path, plain_spec):
    repo, shas = repo8
    store, cache = tmp_path / "s.db", tmp_path / "cache"
    argv = _args(repo, shas, store, cache, plain_spec)
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    answers = [json.loads(o[0])["first_bad"]["sha"] for o in outs]
    assert answers == [shas[5], shas[5]]
    infos = EnvCache(cache).list()
    candidates = [i.target.revision for i in infos]
    assert len(candidates) == len(set(candidates)) >= 4  # one environment per candidate, shared by both
    assert sqlite3.connect(store).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_hostile_ref_never_reaches_a_shell(repo8, tmp_path, plain_spec):
    repo, shas = repo8
    victim = tmp_path / "pwned"
    for ref in (f"v1;touch {victim}", f"$(touch {victim})", f"--upload-pack=touch {victim}", "`id`"):
        argv = _args(repo, shas, tmp_path / "s.db", tmp_path / "c", plain_spec)
        argv[argv.index(shas[0])] = ref
        done = subprocess.run(argv, capture_output=True, text=True)
        assert done.returncode == 2 and "invalid git ref" in done.stderr, done.stderr
    assert not victim.exists()


def test_credentials_in_repo_url_are_redacted(tmp_path, plain_spec):
    argv = [sys.executable, "-m", "bisector", "run", "--package", "tinypkg", "--mode", "commits", "--repo",
            "http://user:s3cret@127.0.0.1:9/none.git", "--good", "a", "--bad", "b", "--probe-cmd", "true",
            "--env", str(plain_spec), "--store", str(tmp_path / "s.db"), "--cache-dir", str(tmp_path / "c")]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode != 0 and "s3cret" not in done.stderr and "***" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_sigterm_during_environment_build_leaves_nothing_half_done(repo8, tmp_path, plain_spec):
    repo, shas = repo8
    store, cache = tmp_path / "s.db", tmp_path / "fresh-cache"
    argv = _args(repo, shas, store, cache, plain_spec)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    building = cache / "tmp"
    end = time.monotonic() + 120
    while not (building.is_dir() and any(building.iterdir())):
        assert proc.poll() is None and time.monotonic() < end, "no environment build was seen"
        time.sleep(0.01)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - start < 5 and proc.returncode == 130, err
    assert "resume" in err
    assert not any(building.iterdir()), "a half-built environment was left behind"
    rows = sqlite3.connect(store).execute("SELECT candidate, status FROM measurements").fetchall()
    assert all(status == "ok" for _, status in rows), rows   # a probe that finished may be kept; no failure is
    done = subprocess.run(argv, capture_output=True, text=True)
    out = json.loads(done.stdout)
    assert out["first_bad"]["sha"] == shas[5] and out["measurements_reused"] >= len(rows)
