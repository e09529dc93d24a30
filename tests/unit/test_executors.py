"""The executor seam's usage errors (fast: no Ray started): one line, exit 2, nothing created."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from bisector.cli.main import main

RUN = ["run", "--package", "tinypkg", "--good", "1.0", "--bad", "2.0", "--probe-cmd", "true"]


def _one_line_exit_2(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("command", ["run", "matrix"])
def test_executor_ray_without_ray_says_what_to_install(tmp_path, capsys, monkeypatch, command):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    store = tmp_path / "s.db"
    if command == "run":
        argv = [*RUN, "--store", str(store), "--executor", "ray"]
    else:
        config = tmp_path / "bisect.toml"
        config.write_text('[matrix.grid]\ntinypkg = ["1.0"]\n[probe]\ncmd = "true"\n')
        argv = ["matrix", "--config", str(config), "--store", str(store), "--out", str(tmp_path / "out"),
                "--executor", "ray"]
    err = _one_line_exit_2(capsys, main(argv))
    python = shlex.quote(sys.executable).replace(str(Path.home()), "~")   # the home directory is redacted
    assert err == f"bisector: error: --executor ray needs Ray, which is not installed here: {python} -m pip install " \
        "'ray>=2.40'\n"   # this route: pip (never bisector's extra by name: it is on no index)
    assert not store.exists() and not (tmp_path / "out").exists()


def test_ray_address_needs_the_ray_executor(tmp_path, capsys):
    err = _one_line_exit_2(capsys, main([*RUN, "--store", str(tmp_path / "s.db"), "--ray-address", "auto"]))
    assert 'command line: run: ray_address is only used with executor = "ray" (--executor ray)' in err
    assert not (tmp_path / "s.db").exists()


def test_executor_from_the_job_file_and_a_bad_one(tmp_path, capsys):
    config = tmp_path / "bisect.toml"
    config.write_text('[job]\npackage = "tinypkg"\ngood = "1.0"\nbad = "2.0"\n[probe]\ncmd = "true"\n'
                      '[run]\nexecutor = "slurm"\n')
    err = _one_line_exit_2(capsys, main(["run", "--config", str(config), "--store", str(tmp_path / "s.db")]))
    assert "run.executor: Input should be 'local' or 'ray'" in err
