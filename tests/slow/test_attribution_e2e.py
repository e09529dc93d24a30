"""Attribution end to end: a real loopback index where a companion moves with the candidate, real
environments for every trial, the companion followed to its first bad release; and the culprit's
confirmation by revert on generated git repositories (confirmed, revert-conflict, not-causal)."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bisector.envs.model.info import read_info
from bisector.store.storage import Store
from tests.support.gitrepo import commit, init_repo, package_files
from tests.support.pkgindex import LocalIndex, build_wheel
from tests.support.printed import run_as_printed

PROBES = Path(__file__).resolve().parent.parent / "probes"
T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
DAY = dt.timedelta(days=1)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bisector", *args], capture_output=True, text=True, timeout=900,
                          env=os.environ.copy())


def publish(idx: LocalIndex, root: Path, name: str, version: str, when: dt.datetime, source: str) -> None:
    idx.add(build_wheel(root / "w", name, version, module_source=source), when)


@pytest.fixture(scope="module")
def companion_index(tmp_path_factory):
    """alpha 1.2 and beta 1.3 come out on one day; only beta carries the step (from its 1.2 on): alpha 1.1's
    environment has beta 1.1, alpha 1.2's beta 1.3."""
    root = tmp_path_factory.mktemp("companion-index")
    idx = LocalIndex(root / "idx")
    for i, version in enumerate(["1.0", "1.1", "1.2", "1.3"]):
        publish(idx, root, "beta", version, T0 + dt.timedelta(days=3 * i) - DAY, f"KIB = {400 if i >= 2 else 100}\n")
    for version, day in (("1.0", 0), ("1.1", 2), ("1.2", 8), ("1.3", 12)):
        publish(idx, root, "alpha", version, T0 + day * DAY + dt.timedelta(minutes=1), "KIB = 1\n")
    with idx.serve() as url:
        yield url


@pytest.fixture(scope="module")
def pair_index(tmp_path_factory):
    """beta and gamma move with alpha 1.1; only the two new ones together make the step."""
    root = tmp_path_factory.mktemp("pair-index")
    idx = LocalIndex(root / "idx")
    publish(idx, root, "alpha", "1.0", T0, "KIB = 1\n")
    publish(idx, root, "alpha", "1.1", T0 + 10 * DAY, "KIB = 1\n")
    for name, day in (("beta", 5), ("gamma", 6)):
        publish(idx, root, name, "1.0", T0 - DAY, "KIB = 100\n")
        publish(idx, root, name, "2.0", T0 + day * DAY, "KIB = 100\nPAIR = True\n")
    with idx.serve() as url:
        yield url


def stack_job(tmp_path: Path, url: str, companions: str, good: str, bad: str, *extra: str) -> list[str]:
    spec = tmp_path / "stack.toml"
    spec.write_text(f'name = "stack"\nbase = "current"\ncompanions = {{{companions}}}\n')
    return ["run", "--package", "alpha", "--good", good, "--bad", bad, "--mode", "releases", "--index-url", url,
            "--probe", str(PROBES / "stack_kib.py"), "--metric", "kib", "--threshold", "300", "--env", str(spec),
            "--store", str(tmp_path / "s.db"), "--cache-dir", str(tmp_path / "cache"), "--json", *extra]


def test_the_companion_is_named_and_followed_to_its_first_bad_release(companion_index, tmp_path):
    job = stack_job(tmp_path, companion_index, 'beta = "as-of-candidate"', "1.0", "1.3")
    proc = cli(*job)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["last_good"]["ref"], out["first_bad"]["ref"]) == ("1.1", "1.2")      # alpha's own boundary
    assert out["also_changed"] == {"beta": ["1.1", "1.3"]}
    a = out["attribution"]
    assert a["kind"] == "companion" and a["packages"] == ["beta"]
    assert [(t["label"], t["verdict"]) for t in a["trials"]] == [("alpha 1.2 + beta==1.1", "good"),
                                                               ("alpha 1.1 + beta==1.3", "bad")]
    assert a["proof"] == [0, 1] and len(a["trials"]) <= a["bound"]
    followed = out["followed"]
    assert followed["package"] == "beta" and followed["first_bad"]["ref"] == "1.2"
    assert followed["last_good"]["ref"] == "1.1" and "alpha==1.2" in followed["command"]
    assert out["headline"].startswith("First bad: beta 1.2, through the companion (bisecting alpha blamed 1.2, "
                                      "whose environment moved beta 1.1 → 1.3)")
    assert [s["phase"] for s in out["steps"]].count("attribution") == 2
    refine = out["refine_command"]                       # the next step follows the companion, not alpha
    assert "--package beta " in refine and "--with alpha==1.2" in refine and "--follow" not in refine
    assert refine.endswith("--mode auto --good 1.1 --bad 1.2 --repo '<REPO>'")
    again = json.loads(cli(*job).stdout)                                        # resumes from the store
    assert again["probes_run"] == 0 and again["followed"]["probes_run"] == 0
    assert again["attribution"]["kind"] == "companion"

    text = cli("report", out["run_id"], "--store", str(tmp_path / "s.db"), "--format", "text").stdout
    attribution = next(i for i, line in enumerate(text.splitlines()) if line.startswith("attribution: "))
    assert attribution <= 2 and text.splitlines()[attribution].startswith(   # under the (wrapped) headline
        "attribution: companion: beta 1.1 → 1.3 explains the step, not alpha")
    assert "  alpha 1.1 + beta==1.3: 401.0 KiB, BAD" in text and "  alpha 1.2 + beta==1.1: 101.0 KiB, GOOD" in text
    markdown = cli("report", out["run_id"], "--store", str(tmp_path / "s.db")).stdout
    assert markdown.startswith("**First bad: beta `1.2`, through the companion**")
    assert "<summary>Followed bisect of beta (run " in markdown and "Attribution trials (2 of 2)" in markdown


def test_without_follow_the_refine_hint_is_the_companions_bisect(companion_index, tmp_path):
    proc = cli(*stack_job(tmp_path, companion_index, 'beta = "as-of-candidate"', "1.0", "1.3", "--no-follow"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["attribution"]["kind"] == "companion" and "followed" not in out
    assert "--package beta --good 1.1 --bad 1.3" in out["refine_command"]
    assert "--with alpha==1.2" in out["refine_command"] and "--no-follow" not in out["refine_command"]
    assert out["headline"].startswith("First bad: alpha 1.2")
    followed = run_as_printed(out["refine_command"])                   # the companion's bisect, as printed
    assert followed.returncode == 0, followed.stderr[-3000:]
    assert json.loads(followed.stdout)["first_bad"]["ref"] == "1.2" and \
        json.loads(followed.stdout)["headline"].startswith("First bad: beta 1.2")


def test_two_companions_that_regress_only_together_are_an_interaction(pair_index, tmp_path):
    proc = cli(*stack_job(tmp_path, pair_index, 'beta = "as-of-candidate", gamma = "as-of-candidate"', "1.0", "1.1"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    a = out["attribution"]
    assert a["kind"] == "interaction" and a["packages"] == ["beta", "gamma"]
    by_label = {t["label"]: t["verdict"] for t in a["trials"]}
    assert by_label["alpha 1.1 + beta==1.0, gamma==1.0"] == "good"            # alpha itself is cleared
    assert by_label["alpha 1.0 + beta==2.0, gamma==2.0"] == "bad"             # the two together
    assert by_label["alpha 1.0 + beta==2.0, gamma==1.0"] == "good"
    assert by_label["alpha 1.0 + beta==1.0, gamma==2.0"] == "good"
    assert "followed" not in out and out.get("refine_command") is None


# -- confirmation by revert ----------------------------------------------------------------------------
MODULE = '''BUFFER_KIB = {kib}


def step():
    return len(bytearray(BUFFER_KIB * 1024))
'''
EXPOSING = '''import helper

BUFFER_KIB = 100 + getattr(helper, "EXTRA_KIB", 0)


def step():
    return len(bytearray(BUFFER_KIB * 1024))
'''


def tiny_repo(root: Path, steps: list[tuple[str, dict[str, str]]]) -> tuple[Path, list[str]]:
    """A repository of tinypkg (version fixed, so only the planted lines differ); one commit a day."""
    repo = init_repo(root / "tinypkg")
    shas = []
    for i, (subject, files) in enumerate(steps):
        start = package_files("tinypkg", "0.1.0") if i == 0 else {}
        shas.append(commit(repo, {**start, **files}, subject, T0 + i * DAY))
    return repo, shas


def module(kib: int) -> dict[str, str]:
    return {"tinypkg/__init__.py": '__version__ = "0.1.0"\n' + MODULE.format(kib=kib)}


def note(i: int) -> dict[str, str]:
    return {f"docs/change-{i}.txt": f"change {i}\n"}


def revert_job(tmp_path: Path, repo: Path, shas: list[str], spec: Path, *extra: str) -> list[str]:
    return ["run", "--package", "tinypkg", "--mode", "commits", "--repo", str(repo), "--good", shas[0], "--bad",
            shas[-1], "--probe", str(PROBES / "tiny_memory.py"), "--metric", "buffer_kib", "--threshold", "200",
            "--env", str(spec), "--store", str(tmp_path / "s.db"), "--cache-dir", str(tmp_path / "cache"),
            "--json", *extra]


def test_a_causal_culprit_is_confirmed_in_its_own_reverted_environment(tmp_path, plain_spec):
    steps = [("start", module(100))] + [(f"docs {i}", note(i)) for i in range(1, 3)]
    steps += [("Grow the buffer (#42)", module(400))] + [(f"docs {i}", note(i)) for i in range(4, 7)]
    repo, shas = tiny_repo(tmp_path / "src", steps)
    proc = cli(*revert_job(tmp_path, repo, shas, plain_spec))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["first_bad"]["sha"] == shas[3]
    c = out["confirmation"]
    assert c["status"] == "confirmed" and (c["culprit"], c["onto"]) == (shas[3], shas[-1])
    assert c["verdict"] == "good" and c["value"] == 100.0
    last = out["steps"][-1]
    assert last["phase"] == "revert" and last["candidate"] == f"{shas[-1][:10]}-revert-{shas[3][:10]}"
    store = Store(tmp_path / "s.db")
    reverted = store.get_measurement(c["measurements"][0])
    plain = [m for m in store.measurements_for("tinypkg") if m.candidate == shas[-1] and m.key != reverted.key]
    store.close()
    info = read_info(Path(reverted.env.path))
    assert info.installed_revision == f"{shas[-1]}-revert-{shas[3]}"           # proved by the health check
    assert plain and reverted.env_fingerprint != plain[0].env_fingerprint
    text = cli("report", out["run_id"], "--store", str(tmp_path / "s.db"), "--format", "text").stdout
    said = next(line for line in text.splitlines() if line.startswith("confirmation: "))   # under the headline
    assert said == f"confirmation: confirmed: reverting {shas[3][:10]} on {shas[-1][:10]} measures 100.0 KiB (GOOD)"
    off = json.loads(cli(*revert_job(tmp_path, repo, shas, plain_spec, "--no-confirm-revert")).stdout)
    assert "confirmation" not in off and off["first_bad"]["sha"] == shas[3]


def test_a_later_change_of_the_same_line_is_a_revert_conflict(tmp_path, plain_spec):
    steps = [("start", module(100)), ("docs 1", note(1)), ("Grow the buffer (#42)", module(400)),
             ("docs 3", note(3)), ("Tune the buffer (#43)", module(300)), ("docs 5", note(5))]
    repo, shas = tiny_repo(tmp_path / "src", steps)
    out = json.loads(cli(*revert_job(tmp_path, repo, shas, plain_spec)).stdout)
    assert out["first_bad"]["sha"] == shas[2]
    c = out["confirmation"]
    assert c["status"] == "revert-conflict" and c["conflicts"] == ["tinypkg/__init__.py"]
    assert c["measurements"] == [] and "revert" not in [s["phase"] for s in out["steps"]]


def test_a_culprit_that_only_exposes_an_earlier_change_is_not_causal(tmp_path):
    """Commit 1 reads helper's EXTRA_KIB (helper 1.0 has none); helper 2.0 comes out on day 3; commit 3,
    a docs change, is the first built against it: reverting it on the bad end changes nothing."""
    root = tmp_path / "idx-root"
    idx = LocalIndex(root / "idx")
    publish(idx, root, "helper", "1.0", T0 - DAY, "")
    publish(idx, root, "helper", "2.0", T0 + 2 * DAY + dt.timedelta(hours=12), "EXTRA_KIB = 300\n")
    exposing = {"tinypkg/__init__.py": '__version__ = "0.1.0"\n' + EXPOSING}
    steps = [("start", module(100)), ("Read helper's extra (#40)", exposing), ("docs 2", note(2)),
             ("docs 3 (#41)", note(3)), ("docs 4", note(4))]
    repo, shas = tiny_repo(tmp_path / "src", steps)
    spec = tmp_path / "helper.toml"
    spec.write_text('name = "helper"\nbase = "current"\ncompanions = {helper = "as-of-candidate"}\n')
    with idx.serve() as url:
        proc = cli(*revert_job(tmp_path, repo, shas, spec, "--index-url", url))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["first_bad"]["sha"] == shas[3] and out["also_changed"] == {"helper": ["1.0", "2.0"]}
    assert out["attribution"]["kind"] == "companion" and out["attribution"]["packages"] == ["helper"]
    c = out["confirmation"]
    assert c["status"] == "not-causal" and c["verdict"] == "bad" and c["value"] == 400.0
    assert any("cannot be followed from a commit candidate" in n for n in out["notes"])


def test_the_followed_companion_goes_down_to_its_commit_with_its_repository(companion_index, tmp_path):
    """--follow-repo: beta's releases, then its commits between the boundary tags; the commit found is
    confirmed by revert, and the headline names it through the companion."""
    def beta(kib: int) -> dict[str, str]:
        return {"beta/__init__.py": f'__version__ = "0.1.0"\nKIB = {kib}\n'}
    repo = init_repo(tmp_path / "beta-src")
    steps = [("start", {**package_files("beta", "0.1.0"), **beta(100)}, "v1.1"), ("docs 1", note(1), None),
             ("Grow the buffer (#44)", beta(400), None), ("docs 3", note(3), "v1.2"), ("docs 4", note(4), "v1.3")]
    shas = []
    for i, (subject, files, tag) in enumerate(steps):
        shas.append(commit(repo, files, subject, T0 + i * DAY))
        if tag:
            subprocess.run(["git", "-C", str(repo), "tag", tag], check=True)
    job = stack_job(tmp_path, companion_index, 'beta = "as-of-candidate"', "1.0", "1.3", "--follow-repo", str(repo))
    job[job.index("releases")] = "auto"
    proc = cli(*job)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    followed = out["followed"]
    assert followed["mode"] == "commit" and followed["first_bad"]["sha"] == shas[2]
    assert followed["first_bad"]["pr"] == 44 and followed["last_good"]["sha"] == shas[1]
    assert followed["confirmation"]["status"] == "confirmed" and followed["confirmation"]["onto"] == shas[3]
    assert out["headline"].startswith(f"First bad: beta {shas[2][:10]} (#44) 'Grow the buffer (#44)', through the "
                                      "companion (bisecting alpha blamed 1.2")
    assert "confirmation" not in out                                           # alpha's answer is a release
