"""Issue 34, "refuse early" and "numbers past Python's int-string limit": inputs that were accepted (and built,
stored or SKIPped) or gave an internal error are one line and exit 2, with nothing created or stored. Each kind
runs through the hostile battery's own checks (tests/process/test_hostile.py: exit code, one line, no file made,
no row stored, no process left, no secret printed), over a world whose index also serves torch 2.0.0 and 2.1.0."""
from __future__ import annotations

import datetime as dt
import time

import pytest

from bisector.job.layering import read_toml
from bisector.errors import UsageError
from tests.process import test_hostile as battery
from tests.support.hostile import T0, Kind, build_world, config_kind, local_index, releases, toml
from tests.support.pkgindex import build_wheel

BIG = "1" + "0" * 5000   # past Python's 4300-digit int-string limit


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("refuse-world")
    idx = local_index(root)
    for i, version in enumerate(("2.0.0", "2.1.0")):
        idx.add(build_wheel(root / "wheels", "torch", version), T0 + dt.timedelta(days=i))
    with idx.serve() as url:
        yield build_world(root, url)


KINDS = [
    Kind("refuse", "two pins of one package", releases("--with", "tinydep==1.0", "--with", "TinyDep==1.1"), 2,
         "pin tinydep twice"),
    Kind("refuse", "two pins of one package by normalised names",
         releases("--with", "numpy==1.26.4", "--with", "NumPy==2.0.0"), 2, "pin numpy twice"),
    Kind("refuse", "two pins spelt with underscore and dot", releases("--with", "tiny_dep==1.0", "--with", "Tiny.Dep==2"),
         2, "pin tiny-dep twice"),
    Kind("refuse", "a torch not on the index", releases(torch="99999.0"), 2,
         "--torch 99999.0: version 99999.0 does not exist (nearest: 2.0.0, 2.1.0)"),
    Kind("refuse", "a file's jobs of the wrong type under --jobs", toml("", "--jobs", "2"), 2,
         'run.jobs: must be a number, not "many"', files={"bisect.toml": battery.JOB_TOML + '[probe]\ncmd = "true"\n'
                                                           '[run]\njobs = "many"\n'}),
    Kind("refuse", "a file's threshold of the wrong type under --threshold", toml("", "--threshold", "1"), 2,
         "criterion.threshold: must be a number, not true",
         files={"bisect.toml": battery.JOB_TOML + '[probe]\nname = "ga_memory"\n[criterion]\nmetric = "m"\n'
                                                  'threshold = true\n'}),
    Kind("refuse", "a file's probe table of the wrong type dropped by --probe-cmd", toml("", "--probe-cmd", "true"), 2,
         "probe.timeout: must be a number, not true",
         files={"bisect.toml": battery.JOB_TOML + '[probe]\nname = "ga_memory"\ntimeout = true\n'}),
    config_kind("an unknown key of 900 KB", "[run]\n" + "k" * 900_000 + " = 1\n", "...(900000 chars): unknown key"),
    config_kind("a dotted key of 100,000 parts", "a" + ".a" * 100_000 + " = 1\n", "a key of more than 256 dotted"),
    config_kind("a job file's number of 5001 digits", "[run]\njobs = " + BIG + "\n",
                "line 11: a number of more than 100 digits"),
    config_kind("a job file's float of 5001 digits", "[criterion]\nthreshold = 1." + BIG + "\n",
                "a number of more than 100 digits"),
    config_kind("a dotted key of 100,000 parts inside an inline table", "x = {a" + ".a" * 100_000 + " = 1}\n",
                "a key of more than 256 dotted parts"),
    config_kind("a quoted dotted key of 100,000 parts", "[run]\n" + '."a"' * 100_000 + " = 1\n",
                "a key of more than 256 dotted parts"),
    config_kind("inline tables nested 100 deep", "x = " + "{a = " * 100 + "1" + "}" * 100 + "\n",
                "nested more than 64 deep"),
    config_kind("a table header of 100,000 parts", "[a" + ".a" * 100_000 + "]\n", "a key of more than 256"),
    Kind("numbers", "an env spec's number of 5001 digits", releases(env="{tmp}/spec.toml"), 2,
         "spec.toml: not valid TOML: line 2: a number of more than 100 digits",
         files={"spec.toml": 'name = "plain"\nx = ' + BIG + '\nbase = "current"\n'}),
    Kind("numbers", "a version of 5001 digits", releases(good=BIG), 2, "...(5001 chars)' is not a valid version"),
    Kind("numbers", "a torch version of 5001 digits", releases(torch=BIG), 2, "is neither 'current'"),
    Kind("numbers", "a max-increase of 5001 digits", releases(metric="m", max_increase=BIG + "%"), 2,
         "is not a percentage"),
    Kind("numbers", "an env gc size of 5001 digits", ["envs", "gc", "--max-size", BIG + "G", "--cache-dir",
                                                      "{tmp}/cache"], 2, "...(5002 chars)' is not a size"),
    Kind("numbers", "an env gc age of 5001 digits", ["envs", "gc", "--older-than", BIG + "d", "--cache-dir",
                                                     "{tmp}/cache"], 2, "is not an age"),
]
BATTERY = [k.id for k in KINDS] + ["refuse: a 900 KB key's one line stays short",   # counted by test_hostile.py
                                    "refuse: a dotted key of 20,000 parts refused in under a second",
                                    "refuse: --ray-address auto without a cluster"]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.id)
def test_refused_up_front(kind: Kind, world, tmp_path, monkeypatch, capsys):
    battery.test_hostile_kind(kind, world, tmp_path, monkeypatch, capsys)
    assert len(capsys.readouterr().err) == 0   # (the battery read it all: one short line)


def test_one_line_stays_short(world, tmp_path, monkeypatch, capsys):
    """A 900 KB key is cut in the one line it gives: the line is short, not 900 KB."""
    (tmp_path / "bisect.toml").write_text(world.fill(battery.JOB_TOML, tmp_path) + "[run]\n" + "k" * 900_000 + " = 1\n")
    monkeypatch.chdir(tmp_path)
    assert battery.main(["run", "--config", str(tmp_path / "bisect.toml"), "--store", str(tmp_path / "s.db")]) == 2
    assert len(capsys.readouterr().err) < 400


def test_a_dotted_key_is_refused_fast(tmp_path):
    """tomllib is quadratic in a dotted key's parts (20,000 parts: seconds, 100,000: minutes): refused first."""
    path = tmp_path / "bisect.toml"
    path.write_text("a" + ".a" * 20_000 + " = 1\n")
    start = time.monotonic()
    with pytest.raises(UsageError, match="a key of more than 256 dotted parts"):
        read_toml(path)
    assert time.monotonic() - start < 1.0
    path.write_text("[job]\nurl = 'https://example.com/a.b.c.d'\n[probe]\nargs = [" + ", ".join(['"1.0.0"'] * 40) + "]\n")
    assert read_toml(path)["job"]["url"] == "https://example.com/a.b.c.d"   # dots in values are no key


def test_ray_auto_without_a_cluster(world, tmp_path, monkeypatch, capsys):
    """--executor ray --ray-address auto where no cluster runs: one line, exit 2, no store (it was exit 1, a store
    made)."""
    services = pytest.importorskip("ray._private.services")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    try:
        services.get_ray_address_from_environment("auto", None)
        pytest.skip("a Ray cluster runs on this machine")
    except ConnectionError:
        pass
    kind = Kind("refuse", "ray auto without a cluster", releases(executor="ray", ray_address="auto"), 2,
                "--ray-address auto: no Ray cluster runs here")
    battery.test_hostile_kind(kind, world, tmp_path, monkeypatch, capsys)
