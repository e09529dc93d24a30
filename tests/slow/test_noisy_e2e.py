"""Stats mode end to end on a noisy timed probe: a generated repository whose probe sleeps
``base * SLOWDOWN * (1 + noise)`` (base 25 ms) and reports that planned time (tests/probes/noisy_timer.py,
seeded noise of +-25%), real environments (built once, reused by every run) and real probe subprocesses,
10 seeds each.

With a +20% step planted at a known commit, every seed names it; without a step no seed names a
culprit. The runs go three at a time (sleeping probes leave the cores mostly idle); each seed is a
probe argument, so it takes its own measurements."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


from bisector.store.storage import Store
from tests.support.gitfixture import make_repo

PROBE = Path(__file__).resolve().parent.parent / "probes" / "noisy_timer.py"
SEEDS, AT_ONCE, PLANTED, BASE = range(10), 3, 3, 0.025


def bisect(repo: Path, shas: list[str], root: Path, env_cache: Path, spec: Path, seed: int, *extra: str) -> dict:
    argv = [sys.executable, "-m", "bisector", "run", "--package", "tinypkg", "--mode", "commits", "--repo", str(repo),
            "--good", shas[0], "--bad", shas[-1], "--env", str(spec), "--store", str(root / "store.db"),
            "--cache-dir", str(env_cache), "--probe", str(PROBE), f"--probe-arg=--seed={seed}",
            f"--probe-arg=--state={root / 'state'}", f"--probe-arg=--base={BASE}", "--metric", "step_seconds", "--compare", "stats",
            "--no-prefetch", "--json", *extra]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert proc.returncode in (0, 3), proc.stderr[-2000:]
    return json.loads(proc.stdout)


def seeded_runs(repo, shas, root, env_cache, spec) -> list[dict]:
    # builds the environments once (5 pairs at most: at alpha 0.01, the fewest that can tell two apart)
    bisect(repo, shas, root, env_cache, spec, 999, "--max-repeats", "5", "--alpha", "0.01")
    with ThreadPoolExecutor(AT_ONCE) as pool:
        return list(pool.map(lambda seed: bisect(repo, shas, root, env_cache, spec, seed), SEEDS))


def test_stats_mode_names_the_planted_commit_in_every_seeded_run(tmp_path, env_cache, plain_spec):
    repo, shas = make_repo(tmp_path / "repo", commits=6, bad_at=PLANTED, slowdown=1.2)
    results = seeded_runs(repo, shas, tmp_path, env_cache, plain_spec)
    named = [r["first_bad"]["sha"] if r.get("first_bad") else r["status"] for r in results]
    assert named == [shas[PLANTED]] * len(SEEDS)
    for r in results:
        assert r["status"] == "found" and r["last_good"]["sha"] == shas[PLANTED - 1]
        bad = r["evidence"]["first_bad"]
        assert bad["vs_good"]["comparison"] == "different" and bad["vs_good"]["p_value"] <= 0.0002
        assert bad["vs_good"]["effect"] >= 0.05 and len(bad["samples"]) == bad["vs_good"]["n_candidate"]


def test_stats_mode_names_no_culprit_without_a_step(tmp_path, env_cache, plain_spec):
    repo, shas = make_repo(tmp_path / "repo", commits=6, bad_at=None)
    results = seeded_runs(repo, shas, tmp_path, env_cache, plain_spec)
    assert [r["status"] for r in results] == ["no-regression"] * len(SEEDS)
    assert all(r.get("first_bad") is None for r in results)


def test_unknown_escalates_then_skips_with_every_sample_stored(tmp_path, env_cache, plain_spec):
    """A +10% step under +-25% noise cannot be told apart in 15 pairs: the bad endpoint takes a round
    of 5 and then a pair at a time, then is a SKIP with its numbers, and the run is undecided; all 30 samples are stored."""
    repo, shas = make_repo(tmp_path / "repo", commits=3, bad_at=1, slowdown=1.1)
    out = bisect(repo, shas, tmp_path, env_cache, plain_spec, 3, "--max-repeats", "15")
    assert out["status"] == "undecided" and "could not be told apart" in out["reason"]
    good, bad = out["steps"]
    assert (good["verdict"], bad["verdict"], bad["repeats"]) == ("good", "skip", 15)
    assert bad["reason"].startswith("the endpoints do not differ decisively: p=") and "15 vs 15 samples" in bad["reason"]
    store = Store(tmp_path / "store.db")
    try:
        rows = store.steps(out["run_id"])
        assert [len(r.measurements) for r in rows] == [15, 15]
        stored = [store.get_measurement(k) for r in rows for k in r.measurements]
        assert all(m is not None and m.status == "ok" for m in stored)
        assert sorted(m.repeat for m in stored if m.candidate == shas[-1]) == list(range(15))
    finally:
        store.close()
    assert bisect(repo, shas, tmp_path, env_cache, plain_spec, 3, "--max-repeats", "15")["probes_run"] == 0
