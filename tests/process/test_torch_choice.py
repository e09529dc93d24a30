"""torch as a decision (--torch / [env] torch), what a torch costs before it is installed (uv's
resolution and the index's file sizes, on a loopback index), and which torch bases gc removes."""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bisector.envs import EnvSpec
from bisector.envs.builders import torch_choice
from bisector.core.requirements import valid_torch_choice as valid_choice
from bisector.envs.builders.torch_choice import choose_torch
from bisector.envs.builders.torch_elsewhere import other_torches
from bisector.envs.builders.torch_size import estimate
from bisector.envs.cache.gc_policy import BaseUse, select_bases
from bisector.sources import install_route
from bisector.errors import UsageError
from bisector.sources.installer_config import uv_binary
from tests.support.pkgindex import LocalIndex, build_wheel
from tests.support.venvs import venv_over_this_interpreter

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
SPEC = EnvSpec(name="s", companions={"transformers": "as-of-candidate"})


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("torchsize")
    idx = LocalIndex(root / "idx")
    idx.add(build_wheel(root / "w", "torch", "2.0.0", dependencies=["cuda-fakelib==1.0", "helperpkg"],
                        module_source=f'PAD = "{"t" * 30000}"\n'), T0)
    idx.add(build_wheel(root / "w", "cuda-fakelib", "1.0", module_source=f'PAD = "{"c" * 20000}"\n'), T0)
    idx.add(build_wheel(root / "w", "helperpkg", "1.0"), T0)
    sizes = {e["project"]: e["size"] for e in idx.files("torch") + idx.files("cuda-fakelib")}
    with idx.serve() as url:
        yield url, sizes


def test_choices_are_checked():
    assert [valid_choice(v) for v in ("current", "per-candidate", "2.13.0", "==2.13.0+cpu")] == \
        ["current", "per-candidate", "2.13.0", "2.13.0+cpu"]
    with pytest.raises(ValueError, match="neither 'current', 'per-candidate' nor a torch version"):
        valid_choice("latest")


def test_each_choice_is_the_base_it_names(monkeypatch):
    monkeypatch.setattr(torch_choice, "interpreter_torch", lambda: "2.13.0+cpu")
    assert choose_torch(SPEC, None, "accelerate") == SPEC                        # this interpreter's torch
    assert choose_torch(SPEC, "current", "accelerate").base == "current"
    assert choose_torch(SPEC, "2.13.0", "accelerate").base == "current"          # that torch is here already
    assert choose_torch(SPEC, "2.11.0", "accelerate").base == "torch==2.11.0"    # a base venv of its own
    per = choose_torch(SPEC, "per-candidate", "accelerate")
    assert per.base == "none" and per.requirements == ["torch"] and per.companions == SPEC.companions
    with pytest.raises(UsageError, match="bisecting torch, each torch release is its own base"):
        choose_torch(SPEC, "2.11.0", "torch")
    assert choose_torch(SPEC, None, "torch") == SPEC


def _no_pip_config(monkeypatch, find_links=None, home=None):
    """pip's configuration off (or only ``find_links``), and no other interpreter with a torch: PATH holds
    only a directory without python, the home no pyenv (each test puts back what it means)."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "VIRTUAL_ENV", "CONDA_PREFIX",
                 "PYENV_ROOT"):
        monkeypatch.delenv(name, raising=False)
    if find_links:
        monkeypatch.setenv("PIP_FIND_LINKS", str(find_links))
    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("PATH", f"{home}:{os.path.dirname(shutil.which('git') or '/usr/bin/git')}")
        monkeypatch.chdir(home)


NAMES_BISECTOR = re.compile(r"install (--\S+ )*(ml-)?bisector\b|(ml-)?bisector\[")   # on no index


def test_no_torch_and_no_choice_stops_with_what_it_would_download(monkeypatch, index, tmp_path):
    url, sizes = index
    _no_pip_config(monkeypatch, home=tmp_path / "home")
    monkeypatch.setattr(torch_choice, "interpreter_torch", lambda: None)
    with pytest.raises(UsageError) as err:
        choose_torch(SPEC, None, "accelerate", url)
    text = str(err.value)
    assert "has no torch and this job does not choose one" in text and "Choose: --torch 2.0.0 (the index's newest: a " in text
    assert "download (the torch wheel" in text and "1 CUDA libraries" in text
    assert re.search(rf"{re.escape(sys.executable)} -m pip install torch==2.0.0 \(a [\d.]+ KiB download\)", text)
    assert re.search(r"else --torch per-candidate \(.*: 2.0.0, the newest, is a [\d.]+ KiB download\)", text)
    assert "\n" not in text and len(text) < 560 and not NAMES_BISECTOR.search(text)
    with pytest.raises(UsageError, match=r"--torch current: bisector's interpreter .* has no torch; install one next "
                       rf"to bisector \({re.escape(sys.executable)} -m pip install torch==2.0.0: a [\d.]+ KiB download\)"):
        choose_torch(SPEC, "current", "accelerate", url)   # pinned, with its size
    assert choose_torch(SPEC, "2.0.0", "accelerate", url).base == "torch==2.0.0"  # chosen: no stop
    assert EnvSpec(name="p", base="torch==2.0.0") == choose_torch(EnvSpec(name="p", base="torch==2.0.0"), None, "x")


ASK = ("import sys; sys.path.insert(0, sys.argv[1]); from bisector.envs.builders.torch_choice import "
       "no_torch_message as m; print(m(sys.argv[2]))")
ROOT = str(Path(__file__).resolve().parents[2])


def _advice(python: Path, url: str) -> str:
    done = subprocess.run([python, "-c", ASK, ROOT, url], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def _imports_torch(python: Path, venv: Path, version: str) -> None:
    got = subprocess.run([python, "-c", "import torch; print(torch.__version__, torch.__file__)"],
                         capture_output=True, text=True, check=True).stdout
    assert got.startswith(f"{version} ") and str(venv) in got


def test_a_torch_already_here_is_the_first_choice_and_its_command_runs_as_printed(monkeypatch, index, tmp_path):
    """A wheel pip's configuration offers locally comes first: --torch of its version (no download) and
    the command that puts it next to bisector on the route it was installed by, which runs as printed."""
    url, _ = index
    wheel = build_wheel(tmp_path / "links", "torch", "2.0.0+cpu")
    _no_pip_config(monkeypatch, tmp_path / "links", home=tmp_path / "home")
    monkeypatch.setattr(torch_choice, "interpreter_torch", lambda: None)
    venv = tmp_path / "tool"   # a fresh environment standing for bisector's own, to run the advice in
    python = venv_over_this_interpreter(venv)
    text = _advice(python, url)
    assert text.split("Choose: ", 1)[1].startswith("--torch 2.0.0+cpu (a wheel pip's configuration offers locally: "
                                                   "no download")
    command = text.split("put it next to bisector: ", 1)[1].split(" (no download); ", 1)[0]
    assert command == f"{python} -m pip install {wheel}" and not NAMES_BISECTOR.search(text)
    subprocess.run(command.split(), check=True, capture_output=True)              # as printed
    _imports_torch(python, venv, "2.0.0+cpu")
    assert choose_torch(SPEC, "2.0.0+cpu", "accelerate", url).base == "torch==2.0.0+cpu"   # the --torch choice holds
    # the other routes name their own installer and the installed distribution, never bisector on the index
    dist = install_route.distribution()
    pipx = tmp_path / "pipx" / "venvs" / dist
    pipx.mkdir(parents=True)
    (pipx / "pipx_metadata.json").write_text(json.dumps({"main_package": {"package": dist, "suffix": "@2"}}))
    monkeypatch.setattr(sys, "prefix", str(pipx))
    assert f"put it next to bisector: pipx inject {dist}@2 {wheel} (no download);" in torch_choice.no_torch_message(url)
    uv = tmp_path / "uv" / "tools" / dist
    uv.mkdir(parents=True)
    (uv / "uv-receipt.toml").write_text(f'[tool]\nrequirements = [{{ name = "{dist}", directory = "/src/b" }}]\n')
    monkeypatch.setattr(sys, "prefix", str(uv))
    assert (f"uv tool install --reinstall /src/b --with {wheel} (no download);" in torch_choice.no_torch_message(url))
    with pytest.raises(UsageError, match=re.escape(f"(uv tool install --reinstall /src/b --with {wheel}: no download)")):
        choose_torch(SPEC, "current", "accelerate", url)


def test_in_a_uv_venv_without_pip_the_command_is_uvs_and_runs_as_printed(monkeypatch, index, tmp_path):
    url, _ = index
    wheel = build_wheel(tmp_path / "links", "torch", "2.0.0+cpu")
    _no_pip_config(monkeypatch, tmp_path / "links", home=tmp_path / "home")
    venv = tmp_path / "uvvenv"
    subprocess.run([uv_binary(), "venv", "--quiet", "--python", sys.executable, venv], check=True, capture_output=True)
    python = venv / "bin" / "python"
    # bisector's dependencies from this interpreter's site-packages, without its pip and torch: a uv venv's
    shown = tmp_path / "site"
    shown.mkdir()
    for site in {p for p in map(Path, sys.path) if p.name == "site-packages" and p.is_dir()}:
        for entry in site.iterdir():
            if not re.match(r"(pip|torch)([-_.]|$)", entry.name) and not (shown / entry.name).exists():
                (shown / entry.name).symlink_to(entry)
    (next(venv.glob("lib/python*/site-packages")) / "zz_deps.pth").write_text(f"{shown}\n")
    assert subprocess.run([python, "-c", "import pip"], capture_output=True).returncode != 0   # no pip here
    monkeypatch.setenv("PATH", f"{Path(uv_binary()).parent}:{os.environ['PATH']}")            # uv as the user has it
    text = _advice(python, url)
    command = text.split("put it next to bisector: ", 1)[1].split(" (no download); ", 1)[0]
    assert command == f"uv pip install --python {python} {wheel}", text
    done = subprocess.run(command.split(), capture_output=True, text=True)                   # as printed
    assert done.returncode == 0, done.stderr
    _imports_torch(python, venv, "2.0.0+cpu")


def test_the_torch_of_another_interpreter_comes_first(monkeypatch, index, tmp_path):
    """A `.venv` in the working directory whose torch is a release the index serves: --torch of that
    version first, its source named, with its size; a nightly elsewhere is never offered."""
    url, _ = index
    home = tmp_path / "home"
    _no_pip_config(monkeypatch, home=home)
    for where, version in ((home / ".venv", "2.0.0"), (home / ".pyenv" / "versions" / "nightly", "2.1.0.dev20250101")):
        subprocess.run([sys.executable, "-m", "venv", where], check=True)
        subprocess.run([where / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        build_wheel(tmp_path / "w", "torch", version)], check=True, capture_output=True)
    (home / ".pyenv" / "versions" / "nightly" / "bin" / "python").rename(home / ".pyenv" / "versions" / "nightly" / "bin" / "python.real")
    (home / ".pyenv" / "versions" / "nightly" / "bin" / "python").symlink_to("python.real")
    monkeypatch.setattr(torch_choice, "interpreter_torch", lambda: None)
    found = [(t.python, t.version) for t in other_torches()]
    assert found == [(str(home / ".venv" / "bin" / "python"), "2.0.0")]      # the nightly is no release
    text = torch_choice.no_torch_message(url)
    assert text.split("Choose: ", 1)[1].startswith(f"--torch 2.0.0 (the torch of {home / '.venv' / 'bin' / 'python'}, "
                                                   "from the index: a "), text


def test_the_estimate_is_the_indexs_sizes_of_what_uv_resolves(index):
    url, sizes = index
    found = estimate("2.0.0", Path(sys.executable), None, url)
    assert (found.version, found.torch_bytes, found.library_bytes, found.libraries) == \
        ("2.0.0", sizes["torch"], sizes["cuda-fakelib"], 1)
    assert found.local_bytes == 0 and found.unknown == []


def test_gc_picks_unused_old_and_over_budget_bases():
    now = 10_000.0
    b = [BaseUse(prefix=Path(f"/b/{n}"), last_used=now - age, size_bytes=size, users=users)
         for n, age, size, users in (("new", 10, 300, 2), ("mid", 5000, 200, 1), ("idle", 4000, 100, 0),
                                     ("fresh-idle", 60, 100, 0))]
    names = lambda chosen: [x.prefix.name for x in chosen]  # noqa: E731
    assert names(select_bases(b, now, grace_s=3600)) == ["idle"]                     # unused for an hour
    assert names(select_bases(b, now, grace_s=3600, older_than_s=4500)) == ["mid", "idle"]
    assert names(select_bases(b, now, grace_s=3600, max_size=400)) == ["mid", "idle"]  # newest 300 + 100 kept
