"""A non-editable install works anywhere: the wheel carries the probes, the env specs and the default
job, and from a directory without bisect.toml the installed `bisector` measures one version and
runs a real two-release bisect (the package index is real: PyPI, or what the installers are
configured with; BISECTOR_OFFLINE=1 skips this)."""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bisector.sources.installer_config import uv_binary

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.environ.get("BISECTOR_OFFLINE") == "1", reason="needs the real package index")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv over this interpreter's packages (the shared torch) with the built wheel in it."""
    root = tmp_path_factory.mktemp("install")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(root / "w")],
                   check=True, capture_output=True)
    (wheel,) = (root / "w").glob("bisector-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
                    str(wheel)], check=True, capture_output=True)
    return wheel, venv, root


def test_the_wheel_carries_the_probes_specs_and_default_job(installed):
    wheel, _, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("bisector/data/probes/ga_memory/__main__.py", "bisector/data/probes/ga_memory/_meter_cpu.py",
                   "bisector/data/probes/import_cost.py", "bisector/data/probes/_probe_contract.py",
                   "bisector/data/specs/default.toml", "bisector/data/default_job.toml"):
        assert needed in names, needed


def _bisector(venv: Path, workdir: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """The installed `bisector` (``venv`` holds bin/bisector, or is the bin directory itself)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    exe = venv / "bisector" if (venv / "bisector").is_file() else venv / "bin" / "bisector"
    return subprocess.run([str(exe), *[a for a in args if a]], cwd=workdir, capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_installed_bisector_measures_and_bisects_from_an_empty_directory(installed):
    _, venv, root = installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import bisector; print(bisector.__file__)"],
                           capture_output=True, text=True, cwd=root, check=True, env=env).stdout
    assert str(venv) in where, where   # the wheel's code, not the checkout's
    empty = root / "empty"
    empty.mkdir()
    common = ["--store", str(root / "s.db"), "--cache-dir", str(root / "cache")]
    probe = _bisector(venv, empty, "probe", "--with", "accelerate==0.22.0", "--json", *common)
    assert probe.returncode == 0, probe.stderr[-3000:]
    m = json.loads(probe.stdout)["metrics"]
    assert m["ga_excess_bytes_per_param"] > 1.0 > m["fp32_ga_cost_bytes_per_param"]   # the seed's, reproduced
    run = _bisector(venv, empty, "run", "--good", "0.27.2", "--bad", "0.28.0", "--mode", "releases",
                    "--probe-arg=--loop=accelerate", "--json", *common)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["status"] == "found" and out["first_bad"]["ref"] == "0.28.0" and out["last_good"]["ref"] == "0.27.2"
    assert sorted(os.listdir(empty)) == []   # nothing written where it ran


@pytest.fixture(scope="module")
def uv_tool(installed, tmp_path_factory):
    """`uv tool install` of the same wheel into a tool directory of its own: no pip there, no torch."""
    wheel, _, _ = installed
    root = tmp_path_factory.mktemp("uvtool")
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
           "UV_TOOL_DIR": str(root / "tools"), "UV_TOOL_BIN_DIR": str(root / "bin")}
    done = subprocess.run([uv_binary(), "tool", "install", "--python", sys.executable, str(wheel)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def test_uv_tool_install_runs_without_pip_and_torch_is_a_choice(uv_tool):
    python = uv_tool / "tools" / "bisector" / "bin" / "python"
    assert subprocess.run([str(python), "-c", "import pip"], capture_output=True).returncode != 0   # no pip here
    assert subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode != 0  # nor torch
    tool = uv_tool / "bin"
    empty = uv_tool / "empty"
    empty.mkdir()
    version = _bisector(tool, empty, "--version")
    assert version.returncode == 0 and version.stdout.startswith("bisector 0.1.0 (probes: command 1.0, ga_memory")
    assert _bisector(tool, empty, "").returncode == 0                               # bare: usage, exit 0
    common = ["--store", str(uv_tool / "s.db"), "--cache-dir", str(uv_tool / "cache")]
    job = ["run", "--good", "0.27.2", "--bad", "0.28.0", "--mode", "releases", "--probe-arg=--loop=accelerate",
           "--json", *common]
    stopped = _bisector(tool, empty, *job)                                          # no torch, none chosen
    assert stopped.returncode == 2 and stopped.stderr.count("\n") == 1, stopped.stderr
    assert "has no torch and this job does not choose one" in stopped.stderr and "download" in stopped.stderr
    assert not (uv_tool / "cache").exists() and not (uv_tool / "s.db").exists()  # nothing created
    torch = importlib.metadata.version("torch")    # the torch this machine's pip installs (its config finds it)
    run = _bisector(tool, empty, *job, "--torch", torch)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["status"] == "found" and out["first_bad"]["ref"] == "0.28.0" and out["last_good"]["ref"] == "0.27.2"
    assert out["environment"]["torch"] == torch and "a base venv with torch==" in out["environment"]["torch from"]
    assert sorted(os.listdir(empty)) == []
