"""End to end: real git repos, real local index, real environments, real probe subprocesses."""
from __future__ import annotations

import shlex
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bisector
from tests.support.gitfixture import make_repo
from tests.support.pkgindex import LocalIndex, build_wheel
from tests.support.printed import run_as_printed

PROBES = Path(__file__).resolve().parent.parent / "probes"
T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)


def cli(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bisector", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def repo30(tmp_path_factory):
    return make_repo(tmp_path_factory.mktemp("repo"), commits=30, bad_at=17)


def _commit_args(repo, shas, tmp_path, env_cache, plain_spec, *extra):
    return ["run", "--package", "tinypkg", "--mode", "commits", "--repo", str(repo), "--good", shas[0],
            "--bad", shas[-1], "--env", str(plain_spec), "--store", str(tmp_path / "store.db"),
            "--cache-dir", str(env_cache), "--json", *extra]


def test_commits_metrics_probe_names_planted_commit(repo30, tmp_path, env_cache, plain_spec):
    repo, shas = repo30
    proc = cli(*_commit_args(repo, shas, tmp_path, env_cache, plain_spec, "--probe",
                             str(PROBES / "tiny_memory.py"), "--metric", "buffer_kib", "--threshold", "200"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "found"
    assert out["first_bad"]["sha"] == shas[17] and out["last_good"]["sha"] == shas[16]
    assert out["first_bad"]["pr"] == 117 and out["first_bad"]["subject"] == "Change number 17 (#117)"
    assert out["probes_run"] <= 5 + 2  # ceil(log2 30) + 2
    assert [s["verdict"] for s in out["steps"][:2]] == ["good", "bad"]
    assert "step  1" in proc.stderr  # progress lines on stderr, JSON alone on stdout
    again = json.loads(cli(*_commit_args(repo, shas, tmp_path, env_cache, plain_spec, "--probe",
                                         str(PROBES / "tiny_memory.py"), "--metric", "buffer_kib",
                                         "--threshold", "200")).stdout)
    assert again["probes_run"] == 0 and again["first_bad"]["sha"] == shas[17]


def test_commits_exit_code_probe(repo30, tmp_path, env_cache, plain_spec):
    repo, shas = repo30
    proc = cli(*_commit_args(repo, shas, tmp_path, env_cache, plain_spec,
                             "--probe-cmd", f"sh {PROBES / 'tiny_exitcode.sh'}"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["first_bad"]["sha"] == shas[17]


def test_builtin_probe_by_name(repo30, tmp_path, env_cache, plain_spec):
    """--probe NAME runs a probe from probes/ (import_cost) inside each candidate environment."""
    repo, shas = repo30
    proc = cli(*_commit_args(repo, shas[:3], tmp_path, env_cache, plain_spec, "--probe", "import_cost",
                             "--metric", "import_modules", "--threshold", "100000", "--full"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "no-regression"
    assert out["steps"][0]["metrics"]["import_modules"] >= 1


@pytest.fixture(scope="module")
def release_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("relindex")
    idx = LocalIndex(root / "idx")
    versions = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0", "1.6.0", "2.0.0rc1", "2.0.0"]
    for i, v in enumerate(versions):
        kib = 400 if v >= "1.4.0" else 100
        src = f"BUFFER_KIB = {kib}\n\ndef step():\n    return len(bytearray(BUFFER_KIB * 1024))\n"
        idx.add(build_wheel(root / "w", "tinypkg", v, module_source=src), T0 + dt.timedelta(days=i))
    with idx.serve() as url:
        yield url


def test_releases_from_local_index(release_index, tmp_path, env_cache, plain_spec):
    proc = cli("run", "--package", "tinypkg", "--mode", "releases", "--good", "v1.0", "--bad", "2.0",
               "--index-url", release_index, "--probe", str(PROBES / "tiny_memory.py"), "--metric",
               "buffer_kib", "--max-increase", "50%", "--env", str(plain_spec), "--store",
               str(tmp_path / "s.db"), "--cache-dir", str(env_cache), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["first_bad"]["ref"] == "1.4.0" and out["last_good"]["ref"] == "1.3.0"
    assert "2.0.0rc1" not in [s["candidate"] for s in out["steps"]]
    assert out["criterion"] == "buffer_kib > 150.0 KiB"


def test_library_api_returns_typed_result(release_index, tmp_path, env_cache, plain_spec):
    result = bisector.bisect("tinypkg", "1.0.0", "1.6.0", store=tmp_path / "s.db", cache_dir=env_cache,
                             job={"mode": "releases", "index_url": release_index, "env": str(plain_spec)},
                             probe={"path": str(PROBES / "tiny_memory.py")},
                             criterion={"metric": "buffer_kib", "threshold": 200})
    assert isinstance(result, bisector.BisectResult)
    assert result.status == "found" and result.first_bad.ref == "1.4.0"


def test_auto_mode_without_repo_prints_refine_command(release_index, tmp_path, env_cache, plain_spec):
    proc = cli("run", "--package", "tinypkg", "--good", "1.0", "--bad", "1.6", "--index-url", release_index,
               "--probe", str(PROBES / "tiny_memory.py"), "--metric", "buffer_kib", "--threshold", "200",
               "--env", str(plain_spec), "--store", str(tmp_path / "s.db"), "--cache-dir", str(env_cache))
    assert proc.returncode == 0, proc.stderr
    assert "--mode auto --good 1.3.0 --bad 1.4.0 --repo" in proc.stdout


def test_predates_range_and_no_regression(release_index, tmp_path, env_cache, plain_spec):
    common = ["--package", "tinypkg", "--mode", "releases", "--index-url", release_index, "--probe",
              str(PROBES / "tiny_memory.py"), "--metric", "buffer_kib", "--threshold", "200", "--env",
              str(plain_spec), "--store", str(tmp_path / "s.db"), "--cache-dir", str(env_cache), "--json"]
    late = cli("run", "--good", "1.4", "--bad", "1.6", *common)
    assert late.returncode == 3 and json.loads(late.stdout)["status"] == "predates-range"
    widen = json.loads(late.stdout)["widen_command"]
    assert widen.startswith("bisector run ") and "--widen" in widen
    widened = run_as_printed(widen)                                   # the suggestion, as printed
    assert widened.returncode == 0, widened.stderr[-3000:]
    assert json.loads(widened.stdout)["first_bad"]["ref"] == "1.4.0"
    early = cli("run", "--good", "1.0", "--bad", "1.3", *common)
    assert early.returncode == 0 and json.loads(early.stdout)["status"] == "no-regression"


def test_killed_run_resumes_with_exactly_the_missing_steps(repo30, tmp_path, env_cache, plain_spec):
    repo, shas = repo30
    args = _commit_args(repo, shas, tmp_path, env_cache, plain_spec, "--probe", str(PROBES / "tiny_memory.py"),
                        "--metric", "peak_bytes", "--threshold", str(200 * 1024), "--no-prefetch")
    reference = json.loads(cli(*[a if a != str(tmp_path / "store.db") else str(tmp_path / "ref.db")
                                 for a in args]).stdout)
    total = reference["probes_run"]
    env = {**os.environ, "TINY_PROBE_SLEEP": "1.5"}
    proc = subprocess.Popen([sys.executable, "-m", "bisector", *args], stderr=subprocess.PIPE, text=True, env=env)
    seen = 0
    for line in proc.stderr:
        if line.lstrip().startswith("step"):
            seen += 1
            if seen == 3:
                proc.send_signal(signal.SIGKILL)
                break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    # killed outright, the run's row still says running, but its process is gone: `runs` says stopped
    listed = cli("runs", "--store", str(tmp_path / "store.db"))
    killed = [line.split()[0] for line in listed.stdout.splitlines() if " stopped " in line]
    assert len(killed) == 1, listed.stdout
    again = cli(*args)
    resumed = json.loads(again.stdout)
    assert f"continuing stopped run {killed[0]}" in again.stderr   # the same command continues that run
    assert resumed["run_id"] == killed[0]
    assert resumed["probes_run"] == total - 3
    assert resumed["measurements_reused"] == 3
    rows = [line for line in cli("runs", "--store", str(tmp_path / "store.db")).stdout.splitlines()[1:]
            if " bisect " in line]
    assert len(rows) == 1 and rows[0].startswith(killed[0]) and " found " in rows[0]   # no orphan beside it
    assert resumed["first_bad"]["sha"] == reference["first_bad"]["sha"] == shas[17]
    by_id = cli("run", "--resume", "--store", str(tmp_path / "store.db"), "--json")
    assert by_id.returncode == 0 and "resuming run" in by_id.stderr
    assert json.loads(by_id.stdout)["probes_run"] == 0


def _release_args(release_index, tmp_path, env_cache, plain_spec, *extra):
    return ["run", "--package", "tinypkg", "--mode", "releases", "--index-url", release_index, "--probe",
            str(PROBES / "tiny_memory.py"), "--metric", "buffer_kib", "--env", str(plain_spec), "--store",
            str(tmp_path / "s.db"), "--cache-dir", str(env_cache), "--json", *extra]


def test_widen_walks_back_to_a_good_release(release_index, tmp_path, env_cache, plain_spec):
    proc = cli(*_release_args(release_index, tmp_path, env_cache, plain_spec, "--threshold", "200",
                              "--good", "1.5", "--bad", "1.6", "--widen"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["first_bad"]["ref"] == "1.4.0" and out["last_good"]["ref"] == "1.3.0"
    assert [s["candidate"] for s in out["steps"] if s["phase"] == "widen"] == ["1.4.0", "1.3.0"]


def test_find_fix_names_the_first_fixed_release(release_index, tmp_path, env_cache, plain_spec):
    # buffer_kib below 200 is the "broken" state here; 1.4.0 is the first release above it
    proc = cli(*_release_args(release_index, tmp_path, env_cache, plain_spec, "--threshold", "200",
                              "--direction", "decrease", "--find-fix", "--bad", "1.0", "--good", "1.6"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "found" and out["first_bad"]["ref"] == "1.4.0"
    assert out["find_fix"] and out["headline"].startswith("First fixed: tinypkg 1.4.0")


def test_kway_search_gives_the_same_answer(repo30, tmp_path, env_cache, plain_spec):
    repo, shas = repo30
    answers = []
    for jobs in ("1", "3"):
        args = _commit_args(repo, shas, tmp_path / jobs, env_cache, plain_spec, "--probe",
                            str(PROBES / "tiny_memory.py"), "--metric", "buffer_kib", "--threshold", "200",
                            "--jobs", jobs)
        (tmp_path / jobs).mkdir()
        proc = cli(*args)
        assert proc.returncode == 0, proc.stderr
        answers.append(json.loads(proc.stdout)["first_bad"]["sha"])
    assert answers == [shas[17], shas[17]]


def env_rows(listing: str) -> list[str]:
    """`envs list`'s rows: between its header and its total."""
    lines = listing.splitlines()
    assert lines[0].split()[:2] == ["environment", "package"] and "environment(s)," in lines[-1], listing
    return lines[1:-1]


def test_envs_list_and_gc_commands(repo30, tmp_path, plain_spec):
    repo, shas = repo30
    cache = tmp_path / "own-cache"
    args = _commit_args(repo, shas[15:19], tmp_path, cache, plain_spec, "--probe-cmd",
                        f"sh {PROBES / 'tiny_exitcode.sh'}")
    assert cli(*args).returncode == 0
    listed = env_rows(cli("envs", "list", "--cache-dir", str(cache)).stdout)
    assert len(listed) >= 3 and all("tinypkg==0.1." in line and " @" in line for line in listed)
    gc = cli("envs", "gc", "--keep-last", "1", "--cache-dir", str(cache))
    assert gc.returncode == 0 and f"removed {len(listed) - 1} environment(s)" in gc.stdout
    assert len(env_rows(cli("envs", "list", "--cache-dir", str(cache)).stdout)) == 1



def test_envs_gc_keeps_the_environment_a_running_probe_uses(repo30, tmp_path, plain_spec):
    """`envs gc` from another process while a probe runs: that environment stays, the run ends well."""
    repo, shas = repo30
    cache, started, go = tmp_path / "own-cache", tmp_path / "started", tmp_path / "go"
    probe = tmp_path / "waiting_probe.sh"
    probe.write_text(f'touch "{started}"\nwhile [ ! -e "{go}" ]; do sleep 0.05; done\n'
                     f'exec sh "{PROBES / "tiny_exitcode.sh"}"\n')
    args = _commit_args(repo, shas[15:19], tmp_path, cache, plain_spec, "--probe-cmd", f"sh {probe}")
    run = subprocess.Popen([sys.executable, "-m", "bisector", *args], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not started.exists():
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.05)
        busy = [line.split()[0] for line in env_rows(cli("envs", "list", "--cache-dir", str(cache)).stdout)
                if line.endswith("in use")]
        assert len(busy) == 1
        gc = cli("envs", "gc", "--keep-last", "0", "--cache-dir", str(cache))  # prefetched ones may go
        assert gc.returncode == 0 and "; kept 1 in use by a running probe" in gc.stdout, gc.stdout
        assert env_rows(cli("envs", "list", "--cache-dir", str(cache)).stdout)[0].startswith(busy[0])
        go.touch()
        out, err = run.communicate(timeout=300)
    finally:
        go.touch()
        run.kill() if run.poll() is None else None
    assert run.returncode == 0 and json.loads(out)["status"] == "found", err
    assert all(s["verdict"] in ("good", "bad") for s in json.loads(out)["steps"])
    gc = cli("envs", "gc", "--keep-last", "0", "--cache-dir", str(cache))
    assert gc.stdout.startswith("removed ") and "in use" not in gc.stdout
    assert env_rows(cli("envs", "list", "--cache-dir", str(cache)).stdout) == []

def test_one_probe_per_gpu(repo30, tmp_path, env_cache, plain_spec):
    """With GPUs visible, each probe of a k-way search gets exactly one of them."""
    repo, shas = repo30
    log = tmp_path / "seen.jsonl"
    proc = cli(*_commit_args(repo, shas, tmp_path, env_cache, plain_spec, "--probe", str(PROBES / "gpu_seen.py"),
                             "--metric", "gpu", "--threshold", "100", "--jobs", "2"),
               env={"CUDA_VISIBLE_DEVICES": "0,1", "GPU_SEEN_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert {r["gpu"] for r in runs} == {"0", "1"} and {r["device"] for r in runs} == {"cuda"}
    overlapping = [(a, b) for i, a in enumerate(runs) for b in runs[i + 1:]
                   if a["start"] < b["end"] and b["start"] < a["end"]]
    assert overlapping and all(a["gpu"] != b["gpu"] for a, b in overlapping)  # never one GPU for two probes


def test_auto_mode_refines_to_the_commit_through_the_metadata_repository(tmp_path, env_cache, plain_spec):
    """Releases first; then the repository named in the first bad release's Project-URL is cloned and
    the commits between the two boundary release tags are bisected."""
    repo, shas = make_repo(tmp_path / "src", commits=10, bad_at=6, tags={3: "v1.3.0", 8: "v1.4.0"})
    idx = LocalIndex(tmp_path / "idx")
    for i, (version, kib) in enumerate((("1.2.0", 100), ("1.3.0", 100), ("1.4.0", 400), ("1.5.0", 400))):
        src = f"BUFFER_KIB = {kib}\n\ndef step():\n    return len(bytearray(BUFFER_KIB * 1024))\n"
        wheel = build_wheel(tmp_path / "w", "tinypkg", version, module_source=src,
                            project_urls=[f"Source, file://{repo}"])
        idx.add(wheel, T0 + dt.timedelta(days=i))
    cache = tmp_path / "cache"
    with idx.serve() as url:
        args = ["run", "--package", "tinypkg", "--good", "1.2", "--bad", "1.5", "--index-url", url, "--probe",
                str(PROBES / "tiny_memory.py"), "--metric", "buffer_kib", "--threshold", "200", "--env",
                str(plain_spec), "--store", str(tmp_path / "s.db"), "--cache-dir", str(cache), "--json"]
        asked = cli(*args)  # without --clone: nothing is downloaded, the refine command names the repository
        assert asked.returncode == 0 and json.loads(asked.stdout)["mode"] == "release", asked.stderr
        said = " ".join(asked.stderr.split())   # the note, as wrapped to the log's 100 columns
        assert not (cache / "repos").exists() and f"metadata names file://{repo}" in said
        refine = json.loads(asked.stdout)["refine_command"]
        assert f"--repo {shlex.quote(f'file://{repo}')}" in refine and refine in " ".join(json.loads(asked.stdout)["notes"][-1].split())
        refined = run_as_printed(refine)                                # the refine command, as printed
        assert refined.returncode == 0, refined.stderr[-3000:]
        commits = json.loads(refined.stdout)
        assert commits["mode"] == "commit" and commits["first_bad"]["sha"] == shas[6], commits["headline"]
        # what the releases measured travels with their measurements: with their environments gone, the
        # rerun reuses them from the store and still finds the repository their metadata named
        shutil.rmtree(cache / "envs")
        proc = cli(*args, "--clone")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["mode"] == "commit" and out["first_bad"]["sha"] == shas[6] and out["last_good"]["sha"] == shas[5]
    assert any("metadata" in n for n in out["notes"]) and (cache / "repos").is_dir()
    assert {s["phase"] for s in out["steps"]} == {"releases", "commits"}
    assert all(s["reused"] for s in out["steps"] if s["phase"] == "releases")


def test_probe_one_version(release_index, tmp_path, env_cache, plain_spec):
    """`bisector probe --with PKG==X` measures one version, stores it, and reuses it the next time."""
    args = ["probe", "--with", "tinypkg==1.4.0", "--index-url", release_index, "--probe",
            str(PROBES / "tiny_memory.py"), "--env", str(plain_spec), "--store", str(tmp_path / "s.db"),
            "--cache-dir", str(env_cache)]
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    assert "tinypkg==1.4.0: ok" in first.stdout and "buffer_kib" in first.stdout and "400" in first.stdout
    again = cli(*args, "--json")
    assert json.loads(again.stdout)["metrics"]["buffer_kib"] == 400.0
    assert "from the store, measured" in cli(*args).stdout
    assert "measured in" in cli(*args, "--fresh").stdout  # a new repeat; the stored ones stay
    missing = cli("probe", "--with", "tinypkg==9.9", "--index-url", release_index, "--env", str(plain_spec),
                  "--store", str(tmp_path / "s.db"), "--cache-dir", str(env_cache))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
