"""torch's nightly level against loopback indexes of tiny wheels named torch (no environment is built):
what a nightly index lists, what a day's environment needs and why a day is a SKIP (no wheel of the
build, a pin the index lacks, no same-day companion), the driver going on from releases to nightlies by
itself (or saying how), ``--mode nightlies`` by days, and the commit range counted in a --repo clone.
Measurements come from the fakes behind the driver's measuring seam."""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bisector.bisection.driver import Bisector
from bisector.core.candidate import CandidateKind
from bisector.core.measurement import Status
from bisector.core.search import Outcome
from bisector.envs import EnvSpec
from bisector.errors import UsageError
from bisector.job.config import JobConfig
from bisector.measure.nightly_env import NightlyIndex
from bisector.sources.nightly import Nightly, candidate, list_nightlies, nightly_day
from bisector.store.storage import Store
from tests.support.fakes import FakeMeasurers
from tests.support.gitfixture import make_repo
from tests.support.pkgindex import LocalIndex, build_wheel

PROBE = Path(__file__).resolve().parent.parent / "probes" / "tiny_memory.py"
T0 = dt.datetime(2026, 9, 10, 7, tzinfo=dt.timezone.utc)
TRITON, MISSING = "pytorch-triton==3.7.0+0123456789", "pytorch-triton==3.7.0+fedcba9876"
DAYS = {1: ("cpu", TRITON), 2: ("cpu", None), 3: ("cpu", None), 4: ("cpu", None), 5: ("cu130", None),
        6: ("cpu", MISSING)}   # day -> (build, pin); 10-03 also has +cu130; 10-05 has no +cpu


def nightly(day: int, label: str = "cpu") -> str:
    return f"2.14.0.dev202610{day:02d}+{label}"


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    root = tmp_path_factory.mktemp("nightly-indexes")
    releases, nightlies = LocalIndex(root / "releases"), LocalIndex(root / "nightly", json_api=False)
    for version, day in (("2.13.0", T0), ("2.14.0", T0 + dt.timedelta(days=40))):
        releases.add(build_wheel(root / "w", "torch", version, module_source=f'__version__ = "{version}+cpu"\n'), day)
    for day, (label, pin) in DAYS.items():
        nightlies.add(build_wheel(root / "w", "torch", nightly(day, label), dependencies=[pin] if pin else []),
                      T0 + dt.timedelta(days=20 + day))
    nightlies.add(build_wheel(root / "w", "torch", nightly(3, "cu130")), T0 + dt.timedelta(days=23))
    nightlies.add(build_wheel(root / "w", "torch", "2.15.0.dev20261101+cpu"), T0 + dt.timedelta(days=52))
    nightlies.add(build_wheel(root / "w", "pytorch-triton", "3.7.0+0123456789"), T0)
    for day in (1, 2):   # a companion's nightlies: 10-01 and 10-02 only
        nightlies.add(build_wheel(root / "w", "torchvision", f"0.29.0.dev202610{day:02d}+cpu"), T0 + dt.timedelta(days=21))
    with releases.serve() as release_url, nightlies.serve() as nightly_url:
        yield release_url, nightly_url


def test_an_html_only_nightly_index_lists_its_nightlies_by_day(indexes):
    found = list_nightlies(indexes[1], "torch")
    assert [n.version for n in found][:3] == [nightly(1), nightly(2), nightly(3)]
    assert nightly(3, "cu130") in [n.version for n in found] and all(n.uploaded is None for n in found)


def test_a_days_environment_is_its_own_build_its_pins_and_its_companions_of_that_day(indexes):
    index = NightlyIndex(indexes[1])
    spec = EnvSpec(name="plain")

    def check(day: int, spec: EnvSpec = spec):
        ref = nightly(day)
        return index.spec_for(spec, candidate("torch", Nightly(version=ref, day=nightly_day(ref), label="cpu")))

    assert check(1) == (spec, None)                       # its pin, pytorch-triton==3.7.0+0123456789, is there
    assert check(3) == (spec, None)                       # +cpu, the +cu130 of that day aside
    assert "that day it holds +cu130" in check(5)[1]
    assert f"requires {MISSING}, which the nightly index" in check(6)[1]
    vision = EnvSpec(name="vision", companions={"torchvision": "as-of-candidate"})
    built, problem = check(2, vision)
    assert problem is None and built.companions == {"torchvision": "==0.29.0.dev20261002+cpu"}
    assert built.extra_index_urls == [indexes[1]]
    assert "no torchvision nightly of 2026-10-03 for the +cpu build" in check(3, vision)[1]


def job(tmp_path, indexes, **fields) -> JobConfig:
    data = {"package": "torch", "good": "2.13.0", "bad": "2.14.0", "index_url": indexes[0],
            "nightly_index": indexes[1], **fields}
    return JobConfig.model_validate({"job": data, "probe": {"path": str(PROBE)},
                                     "criterion": {"metric": "m", "threshold": 1.5},
                                     "run": {"cache_dir": str(tmp_path / "cache")}})


TABLE = {"2.13.0": 1.0, "2.14.0": 2.0, nightly(1): 1.0, nightly(2): 1.0, nightly(3): 1.0, nightly(4): 2.0,
         nightly(5): Status.ENV_FAILED, nightly(6): 2.0}


def bisect(config: JobConfig, store: Store, measurers: FakeMeasurers):
    notes = []

    class Handler:
        def note(self, text):
            notes.append(text)

        def plan(self, phase, candidates):
            pass

        def step(self, step):
            pass

    return Bisector(config, store, measurers, handler=Handler()).run(), notes


def test_releases_go_on_to_the_nightlies_between_them_and_end_with_the_commits_between_two(tmp_path, indexes):
    repo, shas = make_repo(tmp_path, "pytorch", commits=10, bad_at=None)
    gits = {"2.13.0": shas[0], nightly(1): shas[1], nightly(2): shas[2], nightly(3): shas[4], nightly(4): shas[7],
            nightly(6): shas[8], "2.14.0": shas[9]}
    envs = {ref: {"torch": ref if "dev" in ref else f"{ref}+cpu", "torch_git": sha,
                  "repository_url": "https://github.com/pytorch/pytorch"} for ref, sha in gits.items()}
    store = Store(tmp_path / "s.db")
    result, notes = bisect(job(tmp_path, indexes, repo=str(repo)), store, FakeMeasurers(TABLE, envs=envs))
    assert any(n == (f"going on to the nightlies: 6 +cpu nightlies between 2.13.0 and 2.14.0 on {indexes[1]} "
                     "(2026-10-01 .. 2026-10-06), the two releases at their ends") for n in notes), notes
    assert result.status is Outcome.FOUND and result.mode is CandidateKind.NIGHTLY
    assert (result.last_good.ref, result.first_bad.ref) == (nightly(3), nightly(4))
    assert (result.good_end.ref, result.bad_end.ref) == ("2.13.0", "2.14.0")
    c = result.commit_range
    assert (c.older, c.newer, c.commits, c.index_url) == (shas[4], shas[7], 3, indexes[1])
    assert c.link == result.compare_link == f"https://github.com/pytorch/pytorch/compare/{shas[4]}...{shas[7]}"

    again, _ = bisect(job(tmp_path, indexes), store, FakeMeasurers(TABLE, envs=envs))   # no clone: said why
    assert again.commit_range.commits is None and "give --repo" in again.commit_range.why_no_count
    store.close()


def test_without_a_nightly_index_torch_stops_at_releases_and_says_how_to_go_on(tmp_path, indexes):
    store = Store(tmp_path / "s.db")
    result, notes = bisect(job(tmp_path, indexes, nightly_index=None), store, FakeMeasurers(TABLE))
    assert result.first_bad.ref == "2.14.0" and result.commit_range is None
    assert any(n.startswith("torch stops at releases here: --nightly-index URL") for n in notes), notes
    store.close()


def test_mode_nightlies_bisects_the_days_it_is_given(tmp_path, indexes):
    store = Store(tmp_path / "s.db")
    config = job(tmp_path, indexes, mode="nightlies", good="2026-10-02", bad=nightly(6))
    result, _ = bisect(config, store, FakeMeasurers(TABLE))
    assert result.mode is CandidateKind.NIGHTLY and result.first_bad.ref == nightly(4)
    assert (result.good_end.ref, result.bad_end.ref) == (nightly(2), nightly(6))
    with pytest.raises(UsageError, match="no nightly of that day"):
        bisect(job(tmp_path, indexes, mode="nightlies", good="2026-09-01", bad=nightly(4)), store, FakeMeasurers(TABLE))
    with pytest.raises(UsageError, match="several builds"):
        bisect(job(tmp_path, indexes, mode="nightlies", good="2026-10-01", bad="2026-10-04"), store, FakeMeasurers(TABLE))
    store.close()


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bisector", "run", *args], capture_output=True, text=True,
                          timeout=300, env=os.environ.copy())


@pytest.mark.parametrize("args, said", [
    (["--package", "accelerate", "--mode", "nightlies", "--good", "2026-10-01", "--bad", "2026-10-04"],
     "--mode nightlies is torch's"),
    (["--package", "torch", "--mode", "nightlies", "--good", "2026-10-01", "--bad", "2026-10-04"],
     "--mode nightlies needs --nightly-index"),
    (["--package", "torch", "--mode", "nightlies", "--good", "last week", "--bad", "2026-10-04", "--nightly-index", "NI"],
     "is neither a day"),
    (["--package", "torch", "--mode", "nightlies", "--good", "2026-10-04", "--bad", "2026-10-01", "--nightly-index",
      "NI"], "is newer than bad"),
    (["--package", "torch", "--good", "2.13.0", "--bad", "2.14.0", "--nightly-index", "nightly.example"],
     "is not an http(s):// or file:// URL"),
])
def test_a_bad_nightly_job_is_one_line_and_nothing_is_stored(tmp_path, indexes, args, said):
    args = [indexes[1] if a == "NI" else a for a in args]
    proc = cli(*args, "--probe", str(PROBE), "--metric", "m", "--threshold", "1",
               "--store", str(tmp_path / "s.db"), "--cache-dir", str(tmp_path / "cache"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and said in proc.stderr, proc.stderr
    assert not (tmp_path / "s.db").exists()
