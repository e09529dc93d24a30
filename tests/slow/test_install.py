"""A non-editable install works anywhere: the wheel carries the probes, the env specs and the default
job, and from a directory without bisect.toml the installed `bisector` measures one version and
runs a real two-release bisect (the package index is real: PyPI, or what the installers are
configured with; BISECTOR_OFFLINE=1 skips this)."""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bisector.sources.installer_config import uv_binary
from tests.support.venvs import venv_over_this_interpreter

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.environ.get("BISECTOR_OFFLINE") == "1", reason="needs the real package index")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv over this interpreter's packages (the shared torch) with the built wheel in it."""
    root = tmp_path_factory.mktemp("install")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(root / "w")],
                   check=True, capture_output=True)
    (wheel,) = (root / "w").glob("ml_bisector-*.whl")   # the distribution ml-bisector
    venv = root / "venv"
    venv_over_this_interpreter(venv, pip=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
                    str(wheel)], check=True, capture_output=True)
    return wheel, venv, root


def test_the_wheel_carries_the_probes_specs_and_default_job(installed):
    wheel, _, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("bisector/data/probes/ga_memory/__main__.py", "bisector/data/probes/_meters/cpu.py",
                   "bisector/data/probes/ga_memory/_allocator_model/model.py", "bisector/data/probes/CONTRACT.md",
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


def _stop_line(stderr: str) -> tuple[str, str]:
    """(the first choice's --torch value, the command that puts it next to bisector) from the one-line stop."""
    assert stderr.count("\n") == 1 and "has no torch and this job does not choose one" in stderr, stderr
    choice = re.search(r"Choose: --torch (\S+) \(", stderr)[1]
    beside = re.search(r", or put it next to bisector: (.+?) \((?:no download|a [\d.]+ \w+ download)\); else", stderr)[1]
    return choice, beside


def _no_cuda(cache: Path) -> None:
    """Nothing of CUDA was installed anywhere under ``cache``: no nvidia-* (but nvidia-ml-py, bisector's NVML
    binding), cuda-* or triton distribution."""
    found = [p.name for p in cache.rglob("*.dist-info") if re.match(r"(nvidia_(?!ml_py)|triton|cuda_)", p.name)]
    assert found == [], found


def test_uv_tool_install_runs_without_pip_and_torch_is_a_choice(uv_tool):
    python = uv_tool / "tools" / "ml-bisector" / "bin" / "python"
    assert subprocess.run([str(python), "-c", "import pip"], capture_output=True).returncode != 0   # no pip here
    assert subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode != 0  # nor torch
    tool = uv_tool / "bin"
    empty = uv_tool / "empty"
    empty.mkdir()
    version = _bisector(tool, empty, "--version")
    assert version.returncode == 0 and version.stdout.startswith("bisector 0.1.0 (probes: command 1.2, ga_memory")
    assert _bisector(tool, empty, "").returncode == 0                               # bare: usage, exit 0
    common = ["--store", str(uv_tool / "s.db"), "--cache-dir", str(uv_tool / "cache")]
    job = ["run", "--good", "0.27.2", "--bad", "0.28.0", "--mode", "releases", "--probe-arg=--loop=accelerate",
           "--json", *common]
    stopped = _bisector(tool, empty, *job)                                          # no torch, none chosen
    assert stopped.returncode == 2 and stopped.stderr.count("\n") == 1, stopped.stderr
    assert "has no torch and this job does not choose one" in stopped.stderr and "download" in stopped.stderr
    assert not (uv_tool / "cache").exists() and not (uv_tool / "s.db").exists()  # nothing created
    torch = importlib.metadata.version("torch")    # the torch this machine's pip installs (its config finds it)
    choice, _ = _stop_line(stopped.stderr)
    assert choice == torch                         # the torch already here (this interpreter's, a local wheel) first
    run = _bisector(tool, empty, *job, "--torch", choice)                           # the first suggestion, as printed
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["status"] == "found" and out["first_bad"]["ref"] == "0.28.0" and out["last_good"]["ref"] == "0.27.2"
    assert out["environment"]["torch"] == torch and "a base venv with torch==" in out["environment"]["torch from"]
    assert sorted(os.listdir(empty)) == []


def test_uv_tool_the_stops_second_suggestion_runs_as_printed(uv_tool, installed):
    """The stop's `uv tool install --reinstall <its source> --with <the local torch wheel>` runs as printed
    (uv's own tool directory), and then the same job runs on that torch (`current`), no CUDA downloaded."""
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
           "UV_TOOL_DIR": str(uv_tool / "tools"), "UV_TOOL_BIN_DIR": str(uv_tool / "bin")}
    empty = uv_tool / "empty2"
    empty.mkdir()
    common = ["--store", str(uv_tool / "s2.db"), "--cache-dir", str(uv_tool / "cache2")]
    job = ["run", "--good", "0.27.2", "--bad", "0.28.0", "--mode", "releases", "--probe-arg=--loop=accelerate",
           "--json", *common]
    stopped = _bisector(uv_tool / "bin", empty, *job)
    _, beside = _stop_line(stopped.stderr)
    assert beside.startswith("uv tool install --reinstall ") and " --with " in beside and "bisector" not in \
        beside.split(" --with ")[1]
    words = shlex.split(beside)
    done = subprocess.run([uv_binary() if words[0] == "uv" else words[0], *words[1:]], env=env, capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    run = _bisector(uv_tool / "bin", empty, *job)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["status"] == "found" and out["first_bad"]["ref"] == "0.28.0"
    assert out["environment"]["torch"] == importlib.metadata.version("torch") and \
        "interpreter" in out["environment"]["torch from"], out["environment"]
    _no_cuda(uv_tool / "tools")


@pytest.fixture(scope="module")
def pipx(installed, tmp_path_factory):
    """pipx (from the package index, in a venv of its own) and `pipx install` of the built wheel, with
    PIPX_HOME and PIPX_BIN_DIR in a temporary directory: bisector's venv has no torch."""
    wheel, _, _ = installed
    root = tmp_path_factory.mktemp("pipx")
    subprocess.run([sys.executable, "-m", "venv", str(root / "pipxenv")], check=True)
    subprocess.run([str(root / "pipxenv" / "bin" / "python"), "-m", "pip", "install", "-q", "pipx"], check=True,
                   capture_output=True, timeout=600)
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
           "PIPX_HOME": str(root / "home"), "PIPX_BIN_DIR": str(root / "bin"), "PIPX_MAN_DIR": str(root / "man"),
           "PATH": f"{root / 'pipxenv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["pipx", "install", "--python", sys.executable, str(wheel)], env=env, capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return root, env


def test_pipx_install_the_stops_suggestions_run_as_printed(pipx):
    """From a fresh pipx install with no torch: the stop's first suggestion (`--torch` of the torch already
    here, a local wheel pip's configuration offers) bisects without a CUDA download; its second (`pipx
    inject <the installed distribution> <that wheel>`) runs as printed, and then the job needs no --torch."""
    root, env = pipx
    tool = root / "bin"
    empty = root / "empty"
    empty.mkdir()
    assert subprocess.run([str(root / "home" / "venvs" / "ml-bisector" / "bin" / "python"), "-c", "import torch"],
                          capture_output=True).returncode != 0                         # no torch next to bisector
    common = ["--store", str(root / "s.db"), "--cache-dir", str(root / "cache")]
    job = ["run", "--good", "0.27.2", "--bad", "0.28.0", "--mode", "releases", "--probe-arg=--loop=accelerate",
           "--json", *common]
    stopped = _bisector(tool, empty, *job)
    assert stopped.returncode == 2 and not (root / "s.db").exists(), stopped.stderr
    choice, beside = _stop_line(stopped.stderr)
    assert "(no download" in stopped.stderr.split("Choose: ", 1)[1].split(";")[0], stopped.stderr
    run = _bisector(tool, empty, *job, "--torch", choice)                          # the first suggestion
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["status"] == "found" and out["first_bad"]["ref"] == "0.28.0" and out["environment"]["torch"] == choice
    _no_cuda(root / "cache")
    assert beside.startswith("pipx inject ml-bisector "), beside                  # the installed distribution's name
    done = subprocess.run(shlex.split(beside), env=env, capture_output=True, text=True, timeout=1800)   # as printed
    assert done.returncode == 0, done.stderr[-3000:]
    again = _bisector(tool, empty, *job[:-4], "--store", str(root / "s2.db"), "--cache-dir", str(root / "cache2"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["environment"]["torch"] == choice
    _no_cuda(root / "home")
    _no_cuda(root / "cache2")
