"""Bad configuration and bad CLI input: one line naming the problem, exit 2, no traceback."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bisector.cli.main import main

GOOD_TOML = """
[job]
package = "tinypkg"
good = "0.1.0"
bad = "0.2.0"
mode = "releases"
"""

BAD_TOMLS = {
    "not toml": ("[job\npackage=", "not valid TOML"),
    "unknown key": (GOOD_TOML + "colour = 'red'\n", "job.colour: unknown key"),
    "unknown table": (GOOD_TOML + "[jbo]\nx = 1\n", "jbo: unknown key"),
    "another package without its range": ("[job]\npackage='tinypkg'\nbad='2'\n", "give good and bad for tinypkg"),
    "bad mode": (GOOD_TOML.replace('"releases"', '"weekly"'), "job.mode"),
    "bad package name": (GOOD_TOML.replace('"tinypkg"', '"tiny pkg;rm"'), "not a valid package name"),
    "empty good": (GOOD_TOML.replace('"0.1.0"', '"  "'), "job.good: must not be empty"),
    "two probe kinds": (GOOD_TOML + "[probe]\nname='ga_memory'\ncmd='true'\n", "give exactly one of name, path, cmd"),
    "negative timeout": (GOOD_TOML + "[probe]\nname='ga_memory'\ntimeout=-1\n", "timeout must be positive"),
    "two rules": (GOOD_TOML + "[criterion]\nmetric='m'\nthreshold=1\nauto=true\n", "only one of"),
    "rule without metric": (GOOD_TOML + "[probe]\ncmd='true'\n[criterion]\nthreshold=1\n", "needs a metric"),
    "bad increase": (GOOD_TOML + "[criterion]\nmetric='m'\nmax_increase='lots'\n", "not a percentage"),
    "zero repeats": (GOOD_TOML + "[criterion]\nrepeats=0\n", "repeats must be"),
    "bad direction": (GOOD_TOML + "[criterion]\ndirection='sideways'\n", "criterion.direction"),
    "zero jobs": (GOOD_TOML + "[run]\njobs=0\n", "run.jobs: must be at least 1"),
    "wrong type": (GOOD_TOML + "[run]\njobs='many'\n", "run.jobs"),
    "negative noise": (GOOD_TOML + "[criterion]\nnoise=-1\n", "noise must be"),
    "repo url not web": (GOOD_TOML.replace('mode = "releases"', 'repo_url = "file:///x"'), "job.repo_url: must be"),
    "stats with a threshold": (GOOD_TOML + "[criterion]\nmetric='m'\ncompare='stats'\nthreshold=1\n", "give min_effect"),
    "bad min effect": (GOOD_TOML + "[criterion]\nmetric='m'\ncompare='stats'\nmin_effect='big'\n", "not a percentage"),
    "bad alpha": (GOOD_TOML + "[criterion]\nmetric='m'\ncompare='stats'\nalpha=0.9\n", "alpha must be between"),
    "unknown compare": (GOOD_TOML + "[criterion]\nmetric='m'\ncompare='vibes'\n", "criterion.compare"),
}


@pytest.mark.parametrize("name", sorted(BAD_TOMLS))
def test_bad_toml_is_one_line_exit_2(name, tmp_path, capsys):
    text, expected = BAD_TOMLS[name]
    path = tmp_path / "bisect.toml"
    path.write_text(text)
    code = main(["run", "--config", str(path), "--store", str(tmp_path / "s.db")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert str(path) in err and expected in err, err


BAD_ARGS = {
    "missing config file": (["run", "--config", "/nonexistent/bisect.toml"], "file not found"),
    "unknown flag": (["run", "--frobnicate"], "unrecognized arguments"),
    "bad jobs": (["run", "--jobs", "two"], "invalid int value"),
    "bad mode": (["run", "--mode", "weekly"], "invalid choice"),
    "commits without repo": (["run", "--package", "x", "--good", "a", "--bad", "b", "--mode", "commits",
                              "--probe-cmd", "true"], "needs --repo"),
    "unknown probe": (["run", "--package", "x", "--good", "a", "--bad", "b", "--probe", "no_such_probe"],
                      "unknown probe"),
    "missing probe script": (["run", "--package", "x", "--good", "a", "--bad", "b", "--probe", "/no/probe.py"],
                             "not found"),
    "bad ref": (["run", "--package", "x", "--good", "v1;touch /tmp/x", "--bad", "b", "--mode", "commits",
                 "--repo", ".", "--probe-cmd", "true"], "invalid git ref"),
    "option-like ref": (["run", "--package", "x", "--good=--upload-pack=evil", "--bad", "b", "--mode", "commits",
                         "--repo", ".", "--probe-cmd", "true"], "invalid git ref"),
    "missing repo": (["run", "--package", "x", "--good", "a", "--bad", "b", "--mode", "commits",
                      "--repo", "/no/such/repo", "--probe-cmd", "true"], "not found"),
    "bad with": (["probe", "--with", "accelerate>=1"], "must pin one version"),
    "run with a range": (["run", "--package", "x", "--good", "a", "--bad", "b", "--with", "accelerate>=1",
                          "--probe-cmd", "true"], "must pin one version"),
    "run pinning itself": (["run", "--package", "tinypkg", "--good", "a", "--bad", "b", "--with", "TinyPkg==1.0",
                            "--probe-cmd", "true"], "the package under test"),
    "gc without limits": (["envs", "gc"], "needs --keep-last"),
    "bad size": (["envs", "gc", "--max-size", "lots"], "not a size"),
    "no store": (["log"], "no store at"),
}


@pytest.mark.parametrize("name", sorted(BAD_ARGS))
def test_bad_cli_input_is_one_line_exit_2(name, tmp_path, capsys, monkeypatch):
    argv, expected = BAD_ARGS[name]
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("BISECTOR_CACHE_DIR", str(tmp_path / "cache"))
    code = _main([*argv, *(["--store", str(tmp_path / "s.db")] if argv[0] in ("run", "log") else [])])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert expected in err, err


def _main(argv):
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        return exc.code


def test_real_process_prints_no_traceback_and_debug_does(tmp_path):
    path = tmp_path / "bisect.toml"
    path.write_text(GOOD_TOML + "[run]\njobs=0\n")
    cmd = [sys.executable, "-m", "bisector", "run", "--config", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    proc = subprocess.run([sys.executable, "-m", "bisector", "--debug", *cmd[3:]], capture_output=True, text=True)
    assert "Traceback" in proc.stderr
