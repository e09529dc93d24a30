"""The first hour of a new user, one table row per defect found: each asserts the exit code, the
one-line message and that nothing was created or stored; then --help, --probe-arg with a dash,
and live progress under a pseudo-terminal."""
from __future__ import annotations

import datetime as dt
import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest

from bisector.cli.args import glue_dash_values
from bisector.cli.subcommands import build_parser
from bisector.cli.main import main
from tests.support.pkgindex import LocalIndex, build_wheel

PROBES = Path(__file__).resolve().parent.parent / "probes"
T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def index_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("newcomer-index")
    idx = LocalIndex(root / "idx")
    for i, v in enumerate(("1.0.0", "1.1.0", "1.2.0")):
        idx.add(build_wheel(root / "w", "tinypkg", v), T0 + dt.timedelta(days=i))
    with idx.serve() as url:
        yield url


def _run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err.strip()


JOB = ["--package", "tinypkg", "--mode", "releases", "--probe-cmd", "true"]


@pytest.mark.parametrize("name, argv, message", [
    ("read-only command with a missing store", ["runs", "--store", "{tmp}/nonexistent/dir/s.db"], "no store at"),
    ("log of a missing store", ["log", "--store", "{tmp}/none/s.db"], "no store at"),
    ("report of a missing store", ["report", "--store", "{tmp}/none/s.db"], "no store at"),
    ("a foreign store file", ["runs", "--store", "{tmp}/foreign.db"], "not a usable bisector store"),
    ("a typo'd package", ["run", "--package", "tinypkgg", "--good", "1.0", "--bad", "1.2", "--mode", "releases",
                          "--probe-cmd", "true", "--index-url", "{index}", "--store", "{tmp}/s.db"], "not found"),
    ("a reversed range", ["run", *JOB, "--good", "1.2", "--bad", "1.0", "--index-url", "{index}",
                          "--store", "{tmp}/s.db"], "is newer than bad"),
    ("a version that does not exist", ["run", *JOB, "--good", "1.0", "--bad", "9.0", "--index-url", "{index}",
                                       "--store", "{tmp}/s.db"], "does not exist"),
    ("threshold nan", ["run", "--threshold", "nan", "--store", "{tmp}/s.db"], "must be a finite number"),
    ("a negative timeout names the flag", ["run", "--timeout", "-5", "--store", "{tmp}/s.db"],
     "command line: probe: timeout must be positive"),
    ("another package without its range", ["run", "--package", "transformers", "--store", "{tmp}/s.db"],
     "give good and bad for transformers"),
    ("a stray word after --probe-arg", ["run", "--probe-arg", "--loop", "trainer", "--store", "{tmp}/s.db"],
     "unrecognized arguments: trainer"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_is_created(name, argv, message, tmp_path, index_url, capsys,
                                                             monkeypatch):
    monkeypatch.setenv("BISECTOR_CACHE_DIR", str(tmp_path / "user-cache"))
    (tmp_path / "foreign.db").write_text("this is not sqlite")
    before = sorted(p.name for p in tmp_path.iterdir())
    code, err = _run([a.format(tmp=tmp_path, index=index_url) for a in argv], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before   # no store, no cache, no directory
    assert not (tmp_path / "nonexistent").exists()


def test_bare_bisector_prints_usage_and_version_names_the_probes(capsys):
    assert main([]) == 0                                     # no default job started: usage, exit 0
    out = capsys.readouterr().out
    assert out.startswith("usage: bisector") and "start with: bisector run" in out and "  runs " in out
    for flag in ("--version", "-V"):
        assert main([flag]) == 0
        assert capsys.readouterr().out.startswith("bisector 0.1.0 (probes: command 1.2, ga_memory ")
    assert main(["--debug", "--version"]) == 0 and "step_time 1.1" in capsys.readouterr().out


def test_short_flags_users_expect():
    parser = build_parser()
    args = parser.parse_args(["run", "-j", "3", "-q"])
    assert (args.jobs, args.quiet, args.verbose) == (3, True, False)
    assert parser.parse_args(["probe", "--with", "a==1", "-v"]).verbose
    assert parser.parse_args(["matrix", "-j", "2"]).jobs == 2


def test_probe_arg_takes_a_value_that_starts_with_a_dash():
    argv = glue_dash_values(["run", "--probe-arg", "--loop=accelerate", "--probe-arg=--sizes=64"])
    assert build_parser().parse_args(argv).probe_args == ["--loop=accelerate", "--sizes=64"]


def test_every_flag_has_help_and_every_command_examples():
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    for name, sub in commands.items():
        helpless = [a.option_strings or [a.dest] for a in sub._actions if not a.help and a.dest != "help"]
        assert helpless == [], (name, helpless)
        assert sub.epilog and sub.epilog.startswith("examples:") and sub.epilog.count("\n  bisector ") >= 2, name


def _read_pty(argv, env, timeout=300):
    """Run ``argv`` with stderr and stdout on a pseudo-terminal; what it wrote and its exit code."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(leader)
    return b"".join(chunks).decode("utf-8", "replace"), proc.returncode


