"""Verdicts in real bisects: real git commits, real environments, real probe subprocesses.

Every failure class (crash, hang, garbage output, out of memory) is planted at the bad commits of
one 8-commit repository (commits 5..7 bad); noisy timings test the repeats / noise-band rule. All
tests share the session's environment cache, so each commit's environment is built once.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bisector.store.storage import Store
from tests.support.gitfixture import make_repo

PLANTED = 5

PROBE_HEAD = """\
import json, os, sys
import tinypkg
BAD = tinypkg.BUFFER_KIB >= 400
INDEX = int(tinypkg.__version__.rsplit(".", 1)[1])


def write(metrics, **extra):
    with open(os.environ["BISECTOR_RESULT"], "w") as fh:
        json.dump({"metrics": metrics, **extra}, fh)


"""

FAILING = {
    "crash": 'if BAD:\n    raise RuntimeError("boom: step() failed")\n',
    "hang": "if BAD:\n    import time\n    time.sleep(600)\n",
    "garbage": 'if BAD:\n    print("<<garbage>>")\n    open(os.environ["BISECTOR_RESULT"], "w").write("{not json")\n'
               "    sys.exit(0)\n",
    "oom": "class OutOfMemoryError(RuntimeError):\n    pass\n\n\nif BAD:\n"
           '    raise OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total)")\n',
}

# Noisy timings: good commits read about 1.0 s, bad ones about 2.0 s; the threshold is 1.5 s and the
# noise band 0.2 s. PLAN overrides a commit: (mean, spread, warm-up offset of its first two repeats).
NOISY = """\
import random
from pathlib import Path

PLAN = {plan!r}
counter = Path({counters!r}) / os.environ["BISECTOR_CANDIDATE"]
repeat = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(repeat + 1))
mean, spread, warmup = PLAN.get(INDEX, (2.0 if BAD else 1.0, 0.05, 0.0))
rng = random.Random(f"{{tinypkg.BUFFER_KIB}}:{{INDEX}}:{{repeat}}")
write({{"step_s": mean + rng.gauss(0.0, spread) + (warmup if repeat < 2 else 0.0), "kib": tinypkg.BUFFER_KIB}},
      peak_phase="backward" if BAD else "forward")
"""


@pytest.fixture(scope="module")
def repo8(tmp_path_factory):
    return make_repo(tmp_path_factory.mktemp("verdict-repo"), commits=8, bad_at=PLANTED)


def cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """The bisector command, run where no ./bisect.toml can be picked up."""
    return subprocess.run([sys.executable, "-m", "bisector", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ}, cwd=cwd)


def bisect(repo8, tmp_path, env_cache, plain_spec, probe_source: str, *extra: str):
    """Run a commit bisect over the whole repository; returns (process, result JSON)."""
    repo, shas = repo8
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE_HEAD + probe_source)
    proc = cli("run", "--package", "tinypkg", "--mode", "commits", "--repo", str(repo), "--good", shas[0],
               "--bad", shas[-1], "--env", str(plain_spec), "--store", str(tmp_path / "store.db"),
               "--cache-dir", str(env_cache), "--probe", str(probe), "--json", "--full", *extra, cwd=tmp_path)
    assert proc.stdout, proc.stderr
    return proc, json.loads(proc.stdout)


def failing(kind: str) -> str:
    return FAILING[kind] + 'write({"kib": float(tinypkg.BUFFER_KIB)})\n'


def steps_of(out: dict, shas: list[str], index: int) -> list[dict]:
    return [s for s in out["steps"] if s["candidate"] == shas[index][:10]]


def stored_reasons(tmp_path: Path, run_id: str) -> dict[str, str]:
    return {row.candidate.split()[-1][:10]: row.reason for row in Store(tmp_path / "store.db").steps(run_id)}


def assert_shown(tmp_path: Path, run_id: str, needle: str) -> None:
    """The reason is in the markdown report written next to the store, in `bisector log` and `report`."""
    assert needle in (tmp_path / "reports" / f"{run_id}.md").read_text()
    store = str(tmp_path / "store.db")
    log = cli("log", run_id, "--store", store, cwd=tmp_path)
    assert log.returncode == 0 and needle in log.stdout, log.stderr
    text = cli("report", run_id, "--format", "json", "--store", store, cwd=tmp_path)
    assert needle in text.stdout, text.stderr


@pytest.mark.parametrize("kind,reason,extra", [
    ("crash", "crashed: probe exited 1: RuntimeError: boom: step() failed", ()),
    ("hang", "timeout: probe timed out after 2s", ("--timeout", "2")),
    ("garbage", "bad-output: invalid probe result", ()),
])
def test_failures_at_the_bad_commits_are_skips(repo8, tmp_path, env_cache, plain_spec, kind, reason, extra):
    """Nothing at or after the planted commit can be judged: SKIPs with their reasons, UNDECIDED."""
    _, shas = repo8
    proc, out = bisect(repo8, tmp_path, env_cache, plain_spec, failing(kind), "--metric", "kib",
                       "--threshold", "1000", *extra)
    assert proc.returncode == 3 and out["status"] == "undecided"
    assert out["ambiguous"] == [s[:10] for s in shas[PLANTED:]]
    assert out["last_good"]["sha"] == shas[PLANTED - 1]
    for i in range(PLANTED, len(shas)):
        (step,) = steps_of(out, shas, i)
        assert step["verdict"] == "skip" and step["reason"].startswith(reason), step
        assert stored_reasons(tmp_path, out["run_id"])[shas[i][:10]].startswith(reason)
    assert_shown(tmp_path, out["run_id"], reason)


@pytest.mark.parametrize("metric", [("--metric", "kib", "--threshold", "1000"), ()], ids=["metric", "no-metric"])
def test_crash_is_bad_names_the_planted_commit(repo8, tmp_path, env_cache, plain_spec, metric):
    """--crash-is-bad turns the crash into BAD, with a metric criterion and without one."""
    _, shas = repo8
    proc, out = bisect(repo8, tmp_path, env_cache, plain_spec, failing("crash"), *metric, "--crash-is-bad")
    assert proc.returncode == 0, out["reason"]
    assert out["status"] == "found" and out["first_bad"]["sha"] == shas[PLANTED]
    (step,) = steps_of(out, shas, PLANTED)
    assert step["verdict"] == "bad" and "RuntimeError: boom" in step["reason"]


def test_out_of_memory_is_bad_by_default(repo8, tmp_path, env_cache, plain_spec):
    _, shas = repo8
    proc, out = bisect(repo8, tmp_path, env_cache, plain_spec, failing("oom"), "--metric", "kib",
                       "--threshold", "1000")
    assert proc.returncode == 0 and out["first_bad"]["sha"] == shas[PLANTED]
    (step,) = steps_of(out, shas, PLANTED)
    assert step["verdict"] == "bad" and step["value"] is None
    assert "OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB" in step["reason"]
    report = (tmp_path / "reports" / f"{out['run_id']}.md").read_text()
    assert report.splitlines()[0].startswith("**First bad: tinypkg")
    assert "out of memory counts as the regression" in report.splitlines()[0]


def noisy(tmp_path: Path, plan: dict) -> str:
    counters = tmp_path / "counters"
    counters.mkdir()
    return textwrap.dedent(NOISY.format(plan=plan, counters=str(counters)))


NOISE_ARGS = ("--metric", "step_s", "--threshold", "1.5", "--repeats", "3", "--noise", "0.2")


def test_noise_straddle_is_unknown_and_band_is_remeasured(repo8, tmp_path, env_cache, plain_spec):
    """Commit 3 straddles the threshold (SKIP unknown); commit 4 reads high in its first two repeats
    (median in the band, re-measured until it is not); the planted commit is still named."""
    _, shas = repo8
    plan = {3: (1.5, 0.15, 0.0), 4: (1.0, 0.02, 0.4)}
    proc, out = bisect(repo8, tmp_path, env_cache, plain_spec, noisy(tmp_path, plan), *NOISE_ARGS)
    assert proc.returncode == 0, out["reason"]
    assert out["first_bad"]["sha"] == shas[PLANTED] and out["last_good"]["sha"] == shas[PLANTED - 1]
    (straddle,) = steps_of(out, shas, 3)
    assert straddle["verdict"] == "skip" and straddle["repeats"] == 5
    assert straddle["reason"].startswith("unknown: 5 repeats of step_s straddle the threshold 1.5")
    first_four = steps_of(out, shas, 4)[0]
    assert first_four["verdict"] == "good" and first_four["repeats"] == 4
    assert first_four["metrics"]["step_s"] == first_four["value"]      # medians, not the last repeat
    assert [s["phase"] for s in out["steps"]][-2:] == ["commits:confirm"] * 2
    assert_shown(tmp_path, out["run_id"], "straddle the threshold 1.5")
    # the driver fills the report's facts: step dates, per-side probe details, environment
    assert [s["date"][:10] for s in steps_of(out, shas, 3)] == ["2024-01-04"]
    assert out["first_bad"]["details"] == {"peak_phase": "backward"} and out["environment"]["torch"]
    report = json.loads((tmp_path / "reports" / f"{out['run_id']}.json").read_text())
    assert report["explanation"] == ["Moved with it: kib 100.0 → 400.0 KiB, +300%.",
                                     "The peak moved from phase forward (last good) to phase backward (first bad)."]


def test_noise_band_median_after_max_repeats_is_unknown(repo8, tmp_path, env_cache, plain_spec):
    """Commit 3 reads 1.62 s every time: beyond the threshold, but within the 0.2 s noise band.
    The stated rule makes it SKIP after max_repeats (it used to be BAD, and named commit 3)."""
    _, shas = repo8
    proc, out = bisect(repo8, tmp_path, env_cache, plain_spec, noisy(tmp_path, {3: (1.62, 0.01, 0.0)}),
                       *NOISE_ARGS)
    (band,) = steps_of(out, shas, 3)
    assert band["verdict"] == "skip" and band["repeats"] == 5, band
    assert band["reason"].startswith("unknown: 5 repeats of step_s have their median within ±0.2 of the threshold")
    assert proc.returncode == 0 and out["first_bad"]["sha"] == shas[PLANTED]


TRAIN_BREAKS = """\
import torch
import tinypkg

if tinypkg.BUFFER_KIB >= 400:
    raise RuntimeError("boom: the planted change broke training")
w = torch.nn.Parameter(torch.ones(1000))
opt = torch.optim.SGD([w], lr=0.1)
for step in range(3):
    loss = (w * tinypkg.step()).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.parametrize("flags", [("--crash-is-bad",), ()], ids=["crash-is-bad", "no-rule"])
def test_where_your_program_starts_to_crash_is_named_with_its_error_line(repo8, tmp_path, env_cache, plain_spec,
                                                                          flags):
    """Your program after --, no rule: with --crash-is-bad, or by itself once the good end measured and the bad end
    crashed, the bisect is "the program fails"; the first failing commit is named and its error line quoted."""
    repo, shas = repo8
    (tmp_path / "train.py").write_text(TRAIN_BREAKS)
    proc = cli("run", "--package", "tinypkg", "--mode", "commits", "--repo", str(repo), "--good", shas[0],
               "--bad", shas[-1], "--env", str(plain_spec), "--store", str(tmp_path / "store.db"),
               "--cache-dir", str(env_cache), "--json", *flags, "--", "python", "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["status"] == "found" and out["first_bad"]["sha"] == shas[PLANTED] and out.get("metric") is None
    (step,) = steps_of(out, shas, PLANTED)
    assert step["verdict"] == "bad" and step["reason"].endswith("RuntimeError: boom: the planted change broke training")
    report = (tmp_path / "reports" / f"{out['run_id']}.md").read_text()
    first = report.splitlines()[0]
    assert first.startswith("**First bad: tinypkg") and "RuntimeError: boom: the planted change broke training" in first
    assert "      | RuntimeError: boom: the planted change broke training" in proc.stderr   # the failed step's output
    said = [n for n in out["notes"] if "the program starts to fail" in n]
    assert bool(said) is (not flags)
