"""torch's three levels for real: releases, then the nightlies between the boundary releases, then the
commit range between the last good and first bad nightly.

Every torch here is the real CPU wheel of torch 2.13.0 that pip's configuration offers (no other torch
release is needed), re-labelled by tests/support/wheel_relabel.py and streamed by two loopback indexes
(no copy of it is stored): as the releases 2.13.0 and 2.14.0 on a release index (their metadata says
2.13.0, their ``torch.__version__`` 2.13.0+cpu, as PyPI's wheels do), and as six days of nightlies
``2.14.0.devYYYYMMDD+cpu`` on a nightly index that serves only HTML pages, like PyTorch's. Each has its
own ``git_version``: a commit of a small local git repository standing in for torch's.

The re-labelled wheels leave out torch's C++ headers (``torch/include``: 9,431 of the wheel's 12,248
files) and its C++ test binaries (``torch/test``, ``torch/bin`` but ``torch_shm_manager``): nothing that
``import torch`` or the probe uses, and some 200 MB less on disk while a base is built (the first torch base is
the original wheel, which pip's configuration offers for 2.13.0).

What is planted, honestly: the regression is a marker file (``torch/_bisector_planted.txt``) in the
wheels of 2026-10-04 and later and in 2.14.0, which the test probe (tests/probes/torch_marker.py) reads
to allocate a 400 KiB tensor instead of a 100 KiB one; torch's code is the same in every wheel. The
rest is real: pip builds each torch base from the index (pytorch-triton, which some days pin exactly, is
a tiny wheel on the nightly index), uv builds the environments, the probe imports that torch. The days:

  10-01, 10-02, 10-03: +cpu, good (10-03 also has a +cu130 wheel, which the +cpu bases must ignore)
  10-04: +cpu, the planted day (the first bad)
  10-05: only a +cu130 wheel: SKIP (no +cpu wheel that day)
  10-06: +cpu, bad, pinning a pytorch-triton the index does not hold: SKIP
  and, outside the range, 2.13.0.dev20260801+cpu (before 2.13's branch cut) and 2.15.0.dev20261025+cpu
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.gitfixture import make_repo
from tests.support.pkgindex import LocalIndex, build_wheel
from tests.support.torch_wheels import TORCH_DEPENDENCIES, local_torch_wheel, local_wheel, whole
from tests.support.wheel_relabel import relabel

pytestmark = pytest.mark.slow
PROBE = Path(__file__).resolve().parent.parent / "probes" / "torch_marker.py"
MARKER = {"torch/_bisector_planted.txt": b"the regression this test plants\n"}
TRITON, MISSING_TRITON = "pytorch-triton==3.7.0+0123456789", "pytorch-triton==3.7.0+fedcba9876"
# day -> (git commit index, planted, pytorch-triton pin); 10-05 has no +cpu wheel
DAYS = {1: (1, False, TRITON), 2: (3, False, None), 3: (5, False, TRITON), 4: (8, True, TRITON),
        6: (11, True, MISSING_TRITON)}


def lean(path: str) -> bool:
    """What the re-labelled wheels leave out (see the module)."""
    return path.startswith(("torch/include/", "torch/test/")) or (
        path.startswith("torch/bin/") and path != "torch/bin/torch_shm_manager")


def utc(month: int, day: int, hour: int = 7) -> dt.datetime:
    return dt.datetime(2026, month, day, hour, tzinfo=dt.timezone.utc)


def cli(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bisector", *args], capture_output=True, text=True,
                          timeout=timeout, env=os.environ.copy())


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    torch = local_torch_wheel()
    if torch is None:
        pytest.skip("pip's configuration offers no local torch 2.13.0 wheel")
    root = tmp_path_factory.mktemp("nightlies")
    repo, shas = make_repo(root, "pytorch", commits=14, bad_at=None)
    releases, nightlies = LocalIndex(root / "releases"), LocalIndex(root / "nightly", json_api=False)
    for name in TORCH_DEPENDENCIES:     # torch's dependencies, on both (PyTorch's nightly index mirrors them)
        wheel = local_wheel(name)
        assert wheel is not None, f"pip's configuration offers no local {name} wheel"
        for index in (releases, nightlies):
            index.add_virtual(whole(wheel), utc(1, 1))
    for version, git_index, planted, day in (("2.13.0", 0, False, utc(9, 10)), ("2.14.0", 13, True, utc(10, 20))):
        releases.add_virtual(relabel(torch, version, module_version=f"{version}+cpu", git_version=shas[git_index],
                                     extra_files=MARKER if planted else None, leave_out=lean), day)
    for day, (git_index, planted, triton) in DAYS.items():
        nightlies.add_virtual(relabel(torch, f"2.14.0.dev202610{day:02d}+cpu", git_version=shas[git_index],
                                      requires=[triton] if triton else [], extra_files=MARKER if planted else None,
                                      leave_out=lean), utc(10, day))
    fake = root / "fake"                # never installed: other builds, and days outside the range
    for version, day in (("2.14.0.dev20261003+cu130", utc(10, 3)), ("2.14.0.dev20261005+cu130", utc(10, 5)),
                         ("2.13.0.dev20260801+cpu", utc(8, 1)), ("2.15.0.dev20261025+cpu", utc(10, 25))):
        nightlies.add(build_wheel(fake, "torch", version), day)
    nightlies.add(build_wheel(fake, "pytorch-triton", "3.7.0+0123456789"), utc(9, 30))
    with releases.serve() as release_url, nightlies.serve() as nightly_url:
        yield {"releases": release_url, "nightly": nightly_url, "index": nightlies, "repo": repo, "shas": shas}


def disk_bytes(root: Path) -> int:
    """Allocated bytes under ``root``, each inode once (hard-linked files counted once)."""
    seen, total = set(), 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            st = os.lstat(os.path.join(dirpath, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def test_releases_then_nightlies_then_the_commits_between_two_nightlies(world, tmp_path):
    spec = tmp_path / "plain.toml"
    spec.write_text('name = "plain"\nbase = "current"\n')
    cache = tmp_path / "cache"
    job = ["run", "--package", "torch", "--good", "2.13.0", "--bad", "2.14.0", "--index-url", world["releases"],
           "--nightly-index", world["nightly"], "--repo", str(world["repo"]), "--probe", str(PROBE),
           "--metric", "buffer_kib", "--threshold", "200", "--env", str(spec), "--store", str(tmp_path / "s.db"),
           "--cache-dir", str(cache), "--json", "--full", "--no-prefetch"]
    proc = cli(*job)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    shas = world["shas"]

    # the release level found 2.14.0, and went on to the nightlies by itself, saying so in one line
    releases = [s for s in out["steps"] if s["phase"] == "releases"]
    assert [(s["candidate"], s["verdict"]) for s in releases] == [("2.13.0", "good"), ("2.14.0", "bad")]
    said = [n for n in out["notes"] if n.startswith("going on to the nightlies")]
    assert len(said) == 1 and "6 +cpu nightlies between 2.13.0 and 2.14.0" in said[0], out["notes"]
    assert "(2026-10-01 .. 2026-10-06)" in said[0]

    # the nightly level: by date, the +cpu build only, the missing day and the missing pin SKIPs
    nightly = {s["candidate"]: s for s in out["steps"] if s["phase"] == "nightlies"}
    assert set(nightly) == {"2.13.0", "2.14.0", "2.14.0.dev20261003+cpu", "2.14.0.dev20261004+cpu",
                            "2.14.0.dev20261005+cpu", "2.14.0.dev20261006+cpu"}, nightly   # the releases: its ends
    assert nightly["2.14.0.dev20261003+cpu"]["verdict"] == "good"
    assert nightly["2.14.0.dev20261004+cpu"]["verdict"] == "bad"
    no_cpu, no_triton = nightly["2.14.0.dev20261005+cpu"], nightly["2.14.0.dev20261006+cpu"]
    assert no_cpu["verdict"] == "skip" and "that day it holds +cu130" in no_cpu["reason"], no_cpu
    assert no_triton["verdict"] == "skip" and MISSING_TRITON in no_triton["reason"], no_triton
    assert out["status"] == "found" and out["mode"] == "nightly"
    assert (out["last_good"]["ref"], out["first_bad"]["ref"]) == ("2.14.0.dev20261003+cpu", "2.14.0.dev20261004+cpu")
    assert (out["good_end"]["ref"], out["bad_end"]["ref"]) == ("2.13.0", "2.14.0")
    assert "pytorch-triton==3.7.0+0123456789" in out["first_bad"]["pins"]     # the day's own pin, installed
    assert out["first_bad"]["env"]["torch"] == "2.14.0.dev20261004+cpu"

    # the commit range: each side's git_version, the compare link, the count in the --repo clone
    commits = out["commit_range"]
    assert (commits["older"], commits["newer"], commits["commits"]) == (shas[5], shas[8], 3)
    assert commits["link"] == f"https://github.com/pytorch/pytorch/compare/{shas[5]}...{shas[8]}"
    assert out["compare_link"] == commits["link"]
    text = cli("report", out["run_id"], "--format", "text", "--store", str(tmp_path / "s.db")).stdout
    verdict = " ".join(line.strip() for line in text.split("\ncompare:")[0].splitlines())   # (wrapped to a width)
    assert verdict.startswith("First bad: torch 2.14.0.dev20261004+cpu (nightly of 2026-10-04)"), text
    assert f"commits {shas[5][:10]}..{shas[8][:10]} (3 commits): {commits['link']}" in verdict
    print("\n" + text)   # what docs/install.md shows

    # the repro pins the two nightlies by version and index, and reproduces the step in both environments
    repro = cli("report", out["run_id"], "--repro", str(tmp_path / "repro.py"), "--store", str(tmp_path / "s.db"))
    assert repro.returncode == 0 and "reproduces it" in repro.stdout, repro.stdout + repro.stderr
    script = (tmp_path / "repro.py").read_text()
    for venv, day in (("good", "20261003"), ("bad", "20261004")):
        assert f"# $ {venv}/bin/pip install --pre --index-url {world['nightly']} torch==2.14.0.dev{day}+cpu\n" in script
    assert '"verified": true' in cli("report", out["run_id"], "--format", "json",
                                                                       "--store", str(tmp_path / "s.db")).stdout

    # each nightly is a base of its own; the torch files they have in common are stored once
    bases = sorted(p.name.rsplit("-", 1)[0] for p in (cache / "bases").glob("torch-*"))
    assert bases == ["torch-2.13.0", "torch-2.14.0", "torch-2.14.0.dev20261003+cpu", "torch-2.14.0.dev20261004+cpu"]
    assert "building the torch base torch==2.14.0.dev20261004+cpu" in proc.stderr
    assert "torch 2.14.0.dev20261004+cpu: a " in proc.stderr    # its download size, said before it is built
    used = disk_bytes(tmp_path)
    print(f"disk under the test's directory: {used / 2**30:.2f} GiB")
    assert used < 2 * 2**30

    # envs gc knows the nightly bases: the first bad's goes, and the day leaves the index
    listed = cli("envs", "list", "--cache-dir", str(cache)).stdout.splitlines()
    assert any(line.split()[:2] == ["base", "torch==2.14.0.dev20261004+cpu"] for line in listed), listed
    marker = next((cache / "bases").glob("torch-2.14.0.dev20261004+cpu-*/bisector-base.json"))
    os.utime(marker, (0, time.time() - 2 * 86400))
    gc = cli("envs", "gc", "--older-than", "1d", "--cache-dir", str(cache)).stdout.strip()
    assert gc.endswith("and 1 torch base(s)"), gc
    world["index"].remove(next(e["filename"] for e in world["index"].files("torch")
                               if e["filename"].startswith("torch-2.14.0.dev20261004+cpu")))
    again = cli(*job)
    assert again.returncode == 0, again.stderr
    rerun = json.loads(again.stdout)
    assert rerun["first_bad"]["ref"] == "2.14.0.dev20261004+cpu" and rerun["probes_run"] == 0   # reused, not rebuilt
    assert not list((cache / "bases").glob("torch-2.14.0.dev20261004+cpu-*"))
