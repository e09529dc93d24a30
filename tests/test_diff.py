"""``bisector diff`` end to end on a loopback index: lock files differing in six packages where one
matters (ddmin within its documented bound, counted), probe arguments where one matters, a loop
searched knob by knob, the package culprit followed, resumes from the store, and bad input."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bisector
from bisector.core.ddmin import single_bound
from bisector.storage import RunKind, Store
from tests.support.pkgindex import LocalIndex, build_wheel

PROBES = Path(__file__).resolve().parent / "probes"
T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
NAMES = [f"p{i}" for i in range(1, 7)]
MODULES = "--probe-arg=--modules=" + ",".join(NAMES)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bisector", *args], capture_output=True, text=True, timeout=900,
                          env=os.environ.copy())


@pytest.fixture(scope="module")
def index_url(tmp_path_factory):
    """tinypkg 1.0 (the package under test), and p1..p6 at 1.0 and 2.0: only p4 2.0 carries KIB = 300."""
    root = tmp_path_factory.mktemp("diff-index")
    idx = LocalIndex(root / "idx")
    idx.add(build_wheel(root / "w", "tinypkg", "1.0"), T0)
    for i, name in enumerate(NAMES):
        for j, version in enumerate(("1.0", "2.0")):
            kib = 300 if (name, version) == ("p4", "2.0") else 1
            idx.add(build_wheel(root / "w", name, version, module_source=f"KIB = {kib}\n"),
                    T0 - dt.timedelta(days=10 - j - i))
    with idx.serve() as url:
        yield url


def locks(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("# pip freeze of A\n" + "".join(f"{n}==1.0\n" for n in NAMES))
    b.write_text("".join(f"{n}==2.0\n" for n in NAMES))
    return a, b


def common(tmp_path: Path, url: str, plain_spec: Path, env_cache: Path) -> list[str]:
    return ["--index-url", url, "--env", str(plain_spec), "--store", str(tmp_path / "s.db"),
            "--cache-dir", str(env_cache)]


@pytest.mark.slow
def test_lock_files_differing_in_six_packages_name_the_one_that_matters(index_url, tmp_path, plain_spec, env_cache):
    a, b = locks(tmp_path)
    args = ["diff", "--with", "tinypkg==1.0", "--a-lock", str(a), "--b-lock", str(b), "--probe",
            str(PROBES / "sum_kib.py"), MODULES, "--metric", "kib", *common(tmp_path, index_url, plain_spec, env_cache)]
    proc = cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "found" and [c["name"] for c in out["minimal"]] == ["p4"]
    assert (out["minimal"][0]["a"], out["minimal"][0]["b"]) == ("1.0", "2.0")
    assert len(out["changes"]) == 6 and (out["a_value"], out["b_value"]) == (6.0, 305.0)
    searched = len(out["trials"]) - 2                                     # beyond the two ends
    assert searched <= single_bound(6) == 6 and out["bound"] == 2 + single_bound(6)
    assert out["criterion"] == "kib > 155.5" and out["headline"].startswith(
        "The difference that matters at tinypkg 1.0: p4 (A: 1.0, B: 2.0)")
    assert {out["trials"][i]["label"] for i in out["proof"]} >= {"A", "B", "A + p4==2.0"}
    assert "--package p4 --good 1.0 --bad 2.0" in out["follow_command"]
    assert "step  1 diff" in proc.stderr and "A + p4==2.0" in proc.stderr      # each trial printed as a step
    again = json.loads(cli(*args, "--json").stdout)                       # resumes: every trial from the store
    assert again["probes_run"] == 0 and again["minimal"] == out["minimal"]
    store = Store(tmp_path / "s.db")
    run = store.get_run(out["run_id"])
    assert run.kind is RunKind.DIFF and len(store.steps(run.id)) == len(out["trials"])
    store.close()
    text = cli("report", out["run_id"], "--store", str(tmp_path / "s.db"), "--format", "text").stdout
    assert text.startswith("The difference that matters at tinypkg 1.0: p4 (A: 1.0, B: 2.0)")
    log = cli("log", out["run_id"], "--store", str(tmp_path / "s.db")).stdout
    assert log.splitlines()[0].startswith(f"# bisector diff {out['run_id']}: tinypkg 1.0")


@pytest.mark.slow
def test_a_diff_on_a_gpu_host_measures_on_its_gpus_and_its_follow_judges_like_with_like(
        index_url, tmp_path, plain_spec, env_cache, monkeypatch):
    """With GPUs (logical ones here: CUDA_VISIBLE_DEVICES), every trial of the diff and every step of
    the bisect it follows runs on CUDA with the host's GPU: the threshold the diff hands on was measured
    on the device the followed bisect measures on."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-logical-0")
    monkeypatch.setenv("GPU_SEEN_LOG", str(tmp_path / "seen.jsonl"))
    a, b = locks(tmp_path)
    result = bisector.diff("tinypkg", "1.0", a_lock=a, b_lock=b, probe={"path": str(PROBES / "sum_kib.py"),
                           "args": ["--modules=" + ",".join(NAMES)]}, criterion={"metric": "kib"},
                           env=str(plain_spec), index_url=index_url, store=tmp_path / "s.db", cache_dir=env_cache,
                           follow=True)
    assert result.status is bisector.DiffStatus.FOUND and result.followed.status == "found"
    assert result.followed.first_bad.ref == "2.0" and len(result.followed.steps) >= 2
    seen = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    assert len(seen) == result.probes_run + result.followed.probes_run >= len(result.trials) + 2
    assert {(s["device"], s["gpu"]) for s in seen} == {("cuda", "GPU-logical-0")}


@pytest.mark.slow
def test_follow_bisects_the_package_that_is_the_difference(index_url, tmp_path, plain_spec, env_cache):
    a, b = locks(tmp_path)
    result = bisector.diff("tinypkg", "1.0", a_lock=a, b_lock=b, probe={"path": str(PROBES / "sum_kib.py"),
                           "args": ["--modules=" + ",".join(NAMES)]}, criterion={"metric": "kib"},
                           env=str(plain_spec), index_url=index_url, store=tmp_path / "s.db", cache_dir=env_cache,
                           follow=True)
    assert isinstance(result, bisector.DiffResult) and result.status is bisector.DiffStatus.FOUND
    assert result.followed is not None and result.followed.package == "p4"
    assert result.followed.first_bad.ref == "2.0" and result.followed.status == "found"


@pytest.mark.slow
def test_probe_arguments_where_one_matters(index_url, tmp_path, plain_spec, env_cache):
    """Three arguments differ; only --modules reaches the package that matters."""
    proc = cli("diff", "--with", "tinypkg==1.0", "--with", "p4==2.0", "--probe", str(PROBES / "sum_kib.py"),
               "--metric", "kib", "--a-arg=--color=red", "--b-arg=--color=blue", "--a-arg=--modules=p1",
               "--b-arg=--modules=p1,p4", "--a-arg=--fast", *common(tmp_path, index_url, plain_spec, env_cache),
               "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [(c["kind"], c["name"]) for c in out["minimal"]] == [("arg", "--modules")]
    assert sorted(c["name"] for c in out["changes"]) == ["--color", "--fast", "--modules"]
    assert "follow_command" not in out or out["follow_command"] is None


@pytest.mark.slow
def test_a_loop_is_searched_knob_by_knob(index_url, tmp_path, plain_spec, env_cache):
    """A's framework loop decides `buffer` itself, so the knobs go onto B's simple loop; one matters."""
    proc = cli("diff", "--with", "tinypkg==1.0", "--probe", str(PROBES / "knob_probe.py"), "--metric", "kib",
               "--a-arg=--loop=framework", "--b-arg=--loop=simple", *common(tmp_path, index_url, plain_spec, env_cache),
               "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [(c["kind"], c["name"], c["a"], c["b"]) for c in out["minimal"]] == [("knob", "buffer", "big", "small")]
    assert sorted(c["name"] for c in out["changes"]) == ["buffer", "cache", "color"]
    assert out["start"] == "B"
    labels = [t["label"] for t in out["trials"]]
    assert labels[2] == "A + buffer=small, color=red, cache=off" and out["trials"][2]["side"] is None  # refused
    assert labels[3] == "B + buffer=big, color=blue, cache=on" and out["trials"][3]["side"] == "A"       # reproduces
    assert "B + buffer=big" in labels


@pytest.mark.slow
def test_forty_items_with_a_probe_that_always_skips_is_an_honest_undecided(index_url, tmp_path, plain_spec,
                                                                          env_cache):
    flags = [f"--a-arg=--k{i}=a" for i in range(40)] + [f"--b-arg=--k{i}=b" for i in range(40)]
    proc = cli("diff", "--with", "tinypkg==1.0", "--probe", str(PROBES / "always_skip.py"), "--metric", "kib",
               *flags, *common(tmp_path, index_url, plain_spec, env_cache), "--json")
    assert proc.returncode == 3, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "undecided" and "A could not be judged" in out["reason"]
    assert "this probe cannot measure anything here" in out["reason"] and len(out["changes"]) == 40
    store = Store(tmp_path / "s.db")
    assert len(store.steps(out["run_id"])) == 2 and store.get_run(out["run_id"]).status == "undecided"
    store.close()


@pytest.mark.parametrize("extra, expected", [
    (["--a-lock", "BAD", "--b-with", "p1==2.0"], "a.txt:2: 'p1 >= 1.0' is not a NAME==VERSION pin"),
    (["--a-with", "p1==1.0", "--b-with", "p1==9.9"], "p1: version 9.9 does not exist (nearest: 1.0, 2.0)"),
    (["--a-with", "p1==1.0", "--b-with", "p1==1.0"], "A and B are the same setup"),
    (["--a-arg=--x=1", "--b-arg=--x=1"], "A and B are the same setup"),
    (["--a-with", "tinypkg==2.0", "--b-with", "p1==1.0"], "A pins tinypkg 2.0, not the version compared (1.0)"),
    (["--a-with", "p1>=1", "--b-with", "p1==1.0"], "--a-with 'p1>=1' must pin one version with =="),
])
def test_bad_input_is_one_line_and_nothing_stored(index_url, tmp_path, plain_spec, extra, expected):
    lock = tmp_path / "a.txt"
    lock.write_text("p2==1.0\np1 >= 1.0\n")
    extra = [str(lock) if word == "BAD" else word for word in extra]
    proc = cli("diff", "--with", "tinypkg==1.0", "--probe", str(PROBES / "sum_kib.py"), "--metric", "kib", *extra,
               "--index-url", index_url, "--env", str(plain_spec), "--store", str(tmp_path / "s.db"),
               "--cache-dir", str(tmp_path / "cache"))
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1 and expected in proc.stderr, proc.stderr
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "cache").exists()


def test_no_package_under_test_is_a_usage_error(tmp_path):
    proc = cli("diff", "--a-with", "p1==1.0", "--b-with", "p1==2.0", "--store", str(tmp_path / "s.db"))
    assert proc.returncode == 2 and "name the package under test" in proc.stderr
    assert not (tmp_path / "s.db").exists()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("BISECTOR_OFFLINE") == "1", reason="needs accelerate 0.22.0 from the package index")
def test_seed_the_reporters_trainer_loop_against_the_maintainers_loop_is_one_knob(tmp_path, env_cache):
    """The seed thread: the Trainer loop against the hand-written accelerate loop at accelerate 0.22.0 (the real
    ga_memory probe, the default env spec, the real index): zero_grad_target is the one knob that matters."""
    proc = cli("diff", "--with", "accelerate==0.22.0", "--a-arg=--loop=trainer", "--b-arg=--loop=accelerate",
               "--store", str(tmp_path / "s.db"), "--cache-dir", str(env_cache), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [(c["kind"], c["name"], c["a"], c["b"]) for c in out["minimal"]] == [
        ("knob", "zero_grad_target", "model", "optimizer")]
    assert sorted(c["name"] for c in out["changes"]) == ["lr_scheduler", "max_grad_norm", "zero_grad_target"]
    assert out["a_value"] == pytest.approx(1.244, abs=0.01) and out["b_value"] == pytest.approx(0.0, abs=0.01)
    assert out["start"] == "B"                  # Trainer decides zero_grad itself: the knobs go on the accelerate loop
    assert out["headline"].startswith("The difference that matters at accelerate 0.22.0: zero_grad_target")
