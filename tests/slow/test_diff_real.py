"""The slow half of tests/process/test_diff.py: its tests that build real environments and run real probes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import bisector
from bisector.core.ddmin import single_bound
from bisector.store.storage import RunKind, Store

from tests.process.test_diff import MODULES, NAMES, PROBES, cli, common, index_url, locks  # noqa: F401 (helpers and fixtures)


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
    assert out["criterion"] == "kib > 155.5 KiB" and out["headline"].startswith(
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


def test_follow_bisects_the_package_that_is_the_difference(index_url, tmp_path, plain_spec, env_cache):
    a, b = locks(tmp_path)
    result = bisector.diff("tinypkg", "1.0", a_lock=a, b_lock=b, probe={"path": str(PROBES / "sum_kib.py"),
                           "args": ["--modules=" + ",".join(NAMES)]}, criterion={"metric": "kib"},
                           env=str(plain_spec), index_url=index_url, store=tmp_path / "s.db", cache_dir=env_cache,
                           follow=True)
    assert isinstance(result, bisector.DiffResult) and result.status is bisector.DiffStatus.FOUND
    assert result.followed is not None and result.followed.package == "p4"
    assert result.followed.first_bad.ref == "2.0" and result.followed.status == "found"


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


def test_a_diff_killed_outright_is_continued_by_the_same_command_under_its_id(index_url, tmp_path, plain_spec,
                                                                               env_cache):
    """``kill -9`` after the first trial leaves the diff's row ``running`` with its process gone: `runs`
    says stopped, the same command continues it under its id (the trial taken is reused), and one row is
    left, finished."""
    a, b = locks(tmp_path)
    args = ["diff", "--with", "tinypkg==1.0", "--a-lock", str(a), "--b-lock", str(b), "--probe",
            str(PROBES / "sum_kib.py"), MODULES, "--metric", "kib", *common(tmp_path, index_url, plain_spec, env_cache)]
    proc = subprocess.Popen([sys.executable, "-m", "bisector", *args, "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if line.lstrip().startswith("step  1 diff"):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    listed = cli("runs", "--store", str(tmp_path / "s.db")).stdout
    stopped = [line.split()[0] for line in listed.splitlines() if " diff " in line and " stopped " in line]
    assert len(stopped) == 1, listed
    again = cli(*args, "--json")
    out = json.loads(again.stdout)
    assert f"continuing stopped diff {stopped[0]}" in again.stderr and out["run_id"] == stopped[0]
    assert out["status"] == "found" and out["measurements_reused"] >= 1
    rows = [line for line in cli("runs", "--store", str(tmp_path / "s.db")).stdout.splitlines() if " diff " in line]
    assert len(rows) == 1 and rows[0].startswith(stopped[0]) and " found " in rows[0], rows


HOLD = """\
import os, sys
import torch

w = torch.nn.Parameter(torch.ones(1000))
opt = torch.optim.SGD([w], lr=0.1)
extra = int(os.environ.get("EXTRA_MB", "0")) * 1_000_000 + (4_000_000 if "--big" in sys.argv else 0)
for step in range(3):
    held = torch.ones(extra or 1, dtype=torch.uint8)
    loss = (w * 2).sum() + held[:1].float().sum() * 0
    loss.backward()
    opt.step()
    opt.zero_grad()
print("done")
"""


def test_a_program_diff_takes_each_sides_variables_and_words_and_names_the_one_that_matters(
        index_url, tmp_path, plain_spec, env_cache):
    """Your program after --: A and B differ in a variable that holds 8 MB more and one that changes nothing,
    and in a word after the program's own; the variable that matters is named. Two sides that measure the same
    are an answer (exit 0), never an error."""
    (tmp_path / "hold.py").write_text(HOLD)
    where = [*common(tmp_path, index_url, plain_spec, env_cache), "--json"]
    proc = cli("diff", "--with", "tinypkg==1.0", "--a-env", "EXTRA_MB=0", "--b-env", "EXTRA_MB=8",
               "--a-env", "COLOR=red", "--b-env", "COLOR=blue", "--b-arg=--quiet", *where, "--", "python",
               str(tmp_path / "hold.py"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["status"] == "found" and [(c["kind"], c["name"]) for c in out["minimal"]] == [("env", "EXTRA_MB")]
    assert sorted((c["kind"], c["name"]) for c in out["changes"]) == [("arg", "--quiet"), ("env", "COLOR"),
                                                                       ("env", "EXTRA_MB")]
    same = cli("diff", "--with", "tinypkg==1.0", "--a-env", "COLOR=red", "--b-env", "COLOR=blue", *where, "--",
               "python", str(tmp_path / "hold.py"))
    assert same.returncode == 0, same.stderr[-3000:]
    said = json.loads(same.stdout)
    assert said["status"] == "no-difference" and said["reason"].startswith("A and B measure the same step_peak_bytes")
    words = cli("diff", "--with", "tinypkg==1.0", "--b-arg=--big", *where, "--", "python",
                str(tmp_path / "hold.py"))
    assert words.returncode == 0 and [c["name"] for c in json.loads(words.stdout)["minimal"]] == ["--big"], words.stderr
