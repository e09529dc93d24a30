"""torch as the package under test: each torch release becomes the shared base of its
environment (a venv with that torch, built once with pip), the spec's companions are resolved
over it as of that release's date, and the bisect names the release. The "torch" here is a tiny
pure-Python package published under that name on a loopback index (no multi-GB download)."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time

import pytest

from bisector.envs import EnvCache, EnvManager, EnvSpec, InstallTarget
from tests.support.pkgindex import LocalIndex, build_wheel

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
TORCH_VERSIONS = ["2.0.0", "2.1.0", "2.2.0", "2.3.0", "2.4.0"]   # 2.3.0 plants the step
PROBE = """
import json, os, torch, helperpkg
metrics = {"buffer_kib": float(torch.BUFFER_KIB), "helper_major": float(helperpkg.__version__.split(".")[0]),
           "torch_from_a_base": float(os.sep + "bases" + os.sep in os.path.realpath(torch.__file__))}
with open(os.environ["BISECTOR_RESULT"], "w") as fh:
    json.dump({"metrics": metrics}, fh)
"""


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bisector", *args], capture_output=True, text=True,
                          timeout=900, env=os.environ.copy())


@pytest.fixture(scope="module")
def torch_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("torchindex")
    idx = LocalIndex(root / "idx")
    for i, version in enumerate(TORCH_VERSIONS):
        kib = 400 if version >= "2.3.0" else 100
        # like torch's own wheels: the metadata says 2.2.0, the module 2.2.0+cu130 (a label, the same torch);
        # a CUDA library that 2.0.0..2.2.0 share (one version of it) and 2.3.0 moves on from
        lib = "2.0" if version >= "2.3.0" else "1.0"
        idx.add(build_wheel(root / "w", "torch", version, dependencies=[f"cuda-fakelib=={lib}"],
                            module_source=f'__version__ = "{version}+cu130"\nBUFFER_KIB = {kib}\n'),
                T0 + dt.timedelta(days=10 * i))
    for lib in ("1.0", "2.0"):
        idx.add(build_wheel(root / "w", "cuda-fakelib", lib, module_source=f'PAYLOAD = "{"x" * 50000}"\n'),
                T0 - dt.timedelta(days=2))
    # a companion released between torch releases: each torch release gets the one of its date
    idx.add(build_wheel(root / "w", "helperpkg", "1.0"), T0 - dt.timedelta(days=1))
    idx.add(build_wheel(root / "w", "helperpkg", "2.0"), T0 + dt.timedelta(days=25))
    for major, day in (("1.0", 5), ("2.0", 26)):   # a package over torch, for --torch per-candidate
        idx.add(build_wheel(root / "w", "tinyapp", major), T0 + dt.timedelta(days=day))
    with idx.serve() as url:
        yield url


@pytest.fixture
def job(tmp_path, torch_index):
    spec = tmp_path / "torchcand.toml"
    spec.write_text('name = "torchcand"\nbase = "current"\ncompanions = {helperpkg = "as-of-candidate"}\n')
    probe = tmp_path / "torch_probe.py"
    probe.write_text(PROBE)
    return ["run", "--package", "torch", "--good", "2.0", "--bad", "2.4", "--index-url", torch_index,
            "--probe", str(probe), "--metric", "buffer_kib", "--threshold", "200", "--env", str(spec),
            "--store", str(tmp_path / "s.db"), "--cache-dir", str(tmp_path / "cache"), "--json", "--full"]


def test_torch_release_bisect_builds_one_base_per_release(job, tmp_path):
    job = [*job, "--no-prefetch"]  # prefetching would build bases of candidates never measured (tested below)
    proc = cli(*job)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "found"
    assert (out["last_good"]["ref"], out["first_bad"]["ref"]) == ("2.2.0", "2.3.0")
    assert any("torch stops at releases" in note for note in out["notes"])
    assert out["also_changed"] == {"helperpkg": ["1.0", "2.0"]}                # the companion moved too
    assert out["environment"]["env base"].startswith("torch==<candidate>")
    env = out["environment"]                                                   # which torch, from where
    assert env["torch"] == "2.2.0+cu130 (last good) / 2.3.0+cu130 (first bad)", env
    assert "a base venv with torch==2.2.0" in env["torch from"] and "torch==2.3.0" in env["torch from"]
    releases = [s for s in out["steps"] if s["phase"] == "releases"]
    assert all(s["verdict"] in ("good", "bad") for s in releases)            # the +cu130 label is no SKIP
    for step in releases:
        assert step["metrics"]["torch_from_a_base"] == 1.0                    # torch came from its base
        assert step["metrics"]["helper_major"] == (2.0 if step["candidate"] >= "2.3.0" else 1.0)
    # the attribution: torch 2.3.0 with helperpkg back at 1.0 is still bad, so torch itself made the step
    assert out["attribution"]["kind"] == "candidate" and out["attribution"]["packages"] == ["torch"]
    assert [(t["label"], t["verdict"]) for t in out["attribution"]["trials"]] == [("torch 2.3.0 + helperpkg==1.0", "bad")]
    measured = {s["candidate"] for s in releases}
    bases = sorted(p.name.split("-")[1] for p in (tmp_path / "cache" / "bases").glob("torch-*"))
    assert bases == sorted(measured)                                           # one base per measured release
    # the bases of 2.0.0 and 2.2.0 need the same cuda-fakelib 1.0: its files are stored once (hard links)
    lib = {p.name.split("-")[1]: next(p.glob("lib/python*/site-packages/cuda_fakelib/__init__.py"))
           for p in (tmp_path / "cache" / "bases").glob("torch-*")}
    assert os.path.samefile(lib["2.0.0"], lib["2.2.0"]) and not os.path.samefile(lib["2.0.0"], lib["2.3.0"])
    markers = [json.loads(m.read_text()) for m in (tmp_path / "cache" / "bases").glob("torch-*/bisector-base.json")]
    assert sum(m["shared_bytes"] for m in markers) > 50000

    again = json.loads(cli(*job).stdout)                                       # rerun: nothing rebuilt or probed
    assert again["probes_run"] == 0 and again["first_bad"]["ref"] == "2.3.0"

    pinned = cli(*job, "--with", "helperpkg==1.0")                             # what the caution suggests
    assert pinned.returncode == 0, pinned.stderr
    ruled_out = json.loads(pinned.stdout)
    assert ruled_out["first_bad"]["ref"] == "2.3.0" and ruled_out["also_changed"] == {}
    assert {s["metrics"]["helper_major"] for s in ruled_out["steps"]} == {1.0}

    cache = ["--cache-dir", str(tmp_path / "cache")]
    listed = cli("envs", "list", *cache).stdout.splitlines()[1:-1]                 # between header and total
    base_lines = [line for line in listed if line.startswith("base ")]
    assert len(base_lines) == len(bases) and all("used by 2 environment(s)" in line for line in base_lines)
    assert any("shared with other bases" in line for line in base_lines)
    root = tmp_path / "cache" / "bases"
    old = root.glob("torch-2.0.0-*/bisector-base.json").__next__()              # not used for two days:
    os.utime(old, (0, time.time() - 2 * 86400))                                 # it goes, with its environments
    assert cli("envs", "gc", "--older-than", "1d", *cache).stdout.strip() == "removed 2 environment(s) and 1 torch base(s)"
    assert not list(root.glob("torch-2.0.0-*")) and os.path.exists(lib["2.2.0"])   # the shared files stay whole
    assert cli("envs", "gc", "--keep-last", "0", *cache).stdout.strip() == f"removed {len(listed) - len(bases) - 2} environment(s)"
    prefixes = sorted(root.glob("torch-*"), key=lambda p: p.name)
    assert len(prefixes) == len(bases) - 1                                      # used minutes ago: kept
    for age, prefix in enumerate(prefixes):                                     # the last one, most recently used
        os.utime(prefix / "bisector-base.json", (0, time.time() - 100 * (len(prefixes) - age)))
    newest = max(EnvCache(tmp_path / "cache").bases(), key=lambda b: b.last_used)
    gc = cli("envs", "gc", "--bases-max-size", str(newest.size_bytes), *cache).stdout.strip()
    assert gc == f"removed 0 environment(s) and {len(prefixes) - 1} torch base(s)"   # the newest fits the budget
    assert list(root.glob("torch-*")) == [newest.prefix]
    os.utime(newest.prefix / "bisector-base.json", (0, time.time() - 7200))         # unused for an hour and more
    assert cli("envs", "gc", "--keep-last", "0", *cache).stdout.strip() == "removed 0 environment(s) and 1 torch base(s)"
    assert not list(root.glob("torch-*"))


def test_torch_commits_are_refused_in_one_line(job, tmp_path):
    proc = cli(*job, "--mode", "commits", "--repo", str(tmp_path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "torch is bisected by release" in proc.stderr


def test_matrix_with_torch_on_the_grid_makes_each_torch_version_the_base(torch_index, tmp_path):
    """A grid over helperpkg x torch: torch never becomes a companion; each cell's base has its torch."""
    probe = tmp_path / "torch_probe.py"
    probe.write_text(PROBE)
    spec = tmp_path / "plain.toml"
    spec.write_text('name = "plain"\nbase = "current"\n')
    config = tmp_path / "bisect.toml"
    config.write_text(f'[matrix]\nenv = "{spec}"\nmetrics = ["buffer_kib", "helper_major", "torch_from_a_base"]\n'
                      '[matrix.grid]\nhelperpkg = ["1.0", "2.0"]\ntorch = ["2.0.0", "2.3.0"]\n'
                      f'[probe]\npath = "{probe}"\n\n[criterion]\nmetric = "buffer_kib"\nthreshold = 200\n')
    proc = subprocess.run([sys.executable, "-m", "bisector", "matrix", "--config", str(config), "--index-url",
                           torch_index, "--store", str(tmp_path / "s.db"), "--cache-dir", str(tmp_path / "cache"),
                           "--out", str(tmp_path / "out"), "--json"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    cells = {(c["versions"]["helperpkg"], c["versions"]["torch"]): c["metrics"] for c in json.loads(proc.stdout)["cells"]}
    assert set(cells) == {("1.0", "2.0.0"), ("1.0", "2.3.0"), ("2.0", "2.0.0"), ("2.0", "2.3.0")}
    for (helper, torch), metrics in cells.items():
        assert metrics == {"buffer_kib": 400.0 if torch == "2.3.0" else 100.0,
                           "helper_major": float(helper[0]), "torch_from_a_base": 1.0}


def test_matrix_refuses_a_torch_range_pin(tmp_path):
    config = tmp_path / "bisect.toml"
    config.write_text('[matrix]\npins = {torch = ">=2.1"}\n[matrix.grid]\nhelperpkg = ["1.0"]\n')
    proc = subprocess.run([sys.executable, "-m", "bisector", "matrix", "--config", str(config)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "torch is the shared base" in proc.stderr and proc.stderr.count("\n") == 1


def test_probe_with_a_torch_pin_measures_over_that_torch(torch_index, tmp_path):
    """`bisector probe --with helperpkg==2.0 --with torch==2.3.0`: the torch pin is the base;
    `--with torch==2.0.0` alone measures torch itself (the spec's companions over it)."""
    probe = tmp_path / "torch_probe.py"
    probe.write_text(PROBE)
    spec = tmp_path / "torchcand.toml"
    spec.write_text('name = "torchcand"\nbase = "current"\ncompanions = {helperpkg = "as-of-candidate"}\n')
    common = ["--index-url", torch_index, "--probe", str(probe), "--env", str(spec), "--store",
              str(tmp_path / "s.db"), "--cache-dir", str(tmp_path / "cache"), "--json"]
    pinned = cli("probe", "--with", "helperpkg==2.0", "--with", "torch==2.3.0", *common)
    assert pinned.returncode == 0, pinned.stderr
    assert json.loads(pinned.stdout)["metrics"] == {"buffer_kib": 400.0, "helper_major": 2.0, "torch_from_a_base": 1.0}
    itself = cli("probe", "--with", "torch==2.0.0", *common)
    assert itself.returncode == 0, itself.stderr
    assert json.loads(itself.stdout)["metrics"] == {"buffer_kib": 100.0, "helper_major": 1.0, "torch_from_a_base": 1.0}


def test_prefetch_builds_a_torch_base_in_the_background(torch_index, tmp_path):
    """With --prefetch, while a probe runs, the next torch candidates' bases (the slow part) are built
    ahead; without it, none is (each is a download of GBs the search may never need)."""
    spec = EnvSpec(name="plain")
    target = InstallTarget(package="torch", version="2.1.0", index_url=torch_index, as_of=T0 + dt.timedelta(days=11))
    unasked = EnvManager(tmp_path / "cache")                   # a base is GBs: prefetched only on request
    unasked.prefetch(spec, [target])
    assert unasked.wait_prefetch(timeout=300) and not unasked.recipe_is_cheap(spec, target)
    manager = EnvManager(tmp_path / "cache", prefetch_bases=True)   # --prefetch
    assert not manager.recipe_is_cheap(spec, target)
    manager.prefetch(spec, [target])
    assert manager.wait_prefetch(timeout=300) and manager.recipe_is_cheap(spec, target)   # the base is there
    env = manager.ensure(spec, target)
    code = "import torch, os; print(torch.__version__, os.sep + 'bases' + os.sep in os.path.realpath(torch.__file__))"
    out = subprocess.run([str(env.python), "-c", code], env=env.run_env(), capture_output=True, text=True)
    assert out.stdout.split() == ["2.1.0+cu130", "True"], out.stderr


def test_torch_per_candidate_resolves_each_environments_own_torch(torch_index, tmp_path):
    """`--torch per-candidate`: no shared torch (this interpreter's is hidden); each environment resolves
    the torch of its candidate's date, and the report says so."""
    probe = tmp_path / "torch_probe.py"
    probe.write_text(PROBE)
    spec = tmp_path / "plain.toml"
    spec.write_text('name = "plain"\nbase = "current"\ncompanions = {helperpkg = "as-of-candidate"}\n')
    proc = cli("run", "--package", "tinyapp", "--good", "1.0", "--bad", "2.0", "--mode", "releases",
               "--torch", "per-candidate", "--index-url", torch_index, "--probe", str(probe), "--metric",
               "helper_major", "--threshold", "1.5", "--env", str(spec), "--store", str(tmp_path / "s.db"),
               "--cache-dir", str(tmp_path / "cache"), "--json", "--full", "--no-prefetch")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "found" and out["first_bad"]["ref"] == "2.0"
    releases = [s for s in out["steps"] if s["phase"] == "releases"]
    assert releases and all(s["metrics"]["torch_from_a_base"] == 0.0 for s in releases), out["steps"]   # its own
    env = out["environment"]
    assert env["env base"].startswith("none (--torch per-candidate")
    assert env["torch"] == "2.0.0+cu130 (last good) / 2.2.0+cu130 (first bad)", env  # as of each date
    assert env["torch from"] == "the candidate's own environment (resolved as of its date)"
    assert not list((tmp_path / "cache" / "bases").glob("torch-*"))                  # no base venv built


def test_torch_chosen_twice_or_for_a_torch_bisect_is_one_line(job, tmp_path):
    proc = cli(*job, "--torch", "2.1.0")
    assert proc.returncode == 2 and "bisecting torch, each torch release is its own base" in proc.stderr
    proc = cli("run", "--good", "0.27", "--bad", "0.28", "--torch", "2.1.0", "--with", "torch==2.2.0",
               "--store", str(tmp_path / "s.db"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "torch is chosen twice" in proc.stderr
    assert not (tmp_path / "s.db").exists()
