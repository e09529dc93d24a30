"""The command meter wakes however torch first arrives: real programs look torch up before importing it.

``datasets`` and ``transformers`` call ``importlib.util.find_spec("torch")`` before anything imports torch; a
one-shot finder that fired on that lookup never saw the real import ("the command stepped no optimizer", "no
process of the command imported torch"). Each program here is run unchanged, under ``python``, ``torchrun`` and
``accelerate launch`` (1 and 2 processes, gloo on the CPU), and must be measured exactly as one that imports
torch first.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.command_meter import DDP, LOOP, MB, launch, meter, write
from tests.support.venvs import venv_over_this_interpreter

FIRST = {   # what a real program does before torch
    "find_spec": "import importlib.util\nassert importlib.util.find_spec('torch') is not None\n",
    "transformers": "import transformers\nfrom transformers import AutoConfig\n",
    "accelerate": "import accelerate\nfrom accelerate import Accelerator\n",
    "datasets": "import datasets\nfrom datasets import Dataset\n",
}
HOW = {   # other ways torch arrives, each before the loop's own `import torch`
    "import_module": "import importlib\nimportlib.import_module('torch')\n",
    "__import__": "__import__('torch')\n",
    "c_api": ("import ctypes\nctypes.pythonapi.PyImport_ImportModule.restype = ctypes.py_object\n"
              "ctypes.pythonapi.PyImport_ImportModule(b'torch')   # as a C extension imports it\n"),
    "lazy": ("import importlib.util, sys\nspec = importlib.util.find_spec('torch')\n"
             "loader = importlib.util.LazyLoader(spec.loader)\nspec.loader = loader\n"
             "module = importlib.util.module_from_spec(spec)\nsys.modules['torch'] = module\n"
             "loader.exec_module(module)\nmodule.ones   # first use: torch is imported now\n"),
}


def _needs(first: str) -> None:
    if first in ("transformers", "accelerate", "datasets"):
        pytest.importorskip(first)


def _measured_exactly(done, r, steps=4):
    assert done.returncode == 0, done.stderr[-2000:]
    assert r.get("error") is None, r.get("error")
    m = r["metrics"]
    assert m["optimizer_steps"] == steps and MB <= m["step_peak_bytes"] < MB + 8192, m
    return m


@pytest.mark.parametrize("first", [*FIRST, *HOW])
def test_torch_is_hooked_whatever_comes_before_it(tmp_path, first):
    _needs(first)
    write(tmp_path, "train.py", (FIRST.get(first) or HOW[first]) + LOOP.format(steps=4, mb=MB))
    done, r = meter(tmp_path, sys.executable, "train.py")
    _measured_exactly(done, r)
    assert done.stdout.count("loss") == 4


def test_torch_already_imported_before_the_meter_is_hooked_at_once(tmp_path):
    """A ``.pth`` file in the environment's site-packages imports torch before any ``sitecustomize`` runs (the
    environment is a fresh venv, so this holds whether the tests run in a venv, where no user site is read, or not)."""
    python = venv_over_this_interpreter(tmp_path / "env")
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "early.pth").write_text("import torch\n")   # read after _over_this_interpreter.pth
    write(tmp_path, "train.py", LOOP.format(steps=4, mb=MB))
    done, r = meter(tmp_path, str(python), "train.py", args=("--keep-records", str(tmp_path / "k")), python=str(python))
    _measured_exactly(done, r)
    assert '"torch_seen":"present"' in "".join(p.read_text() for p in (tmp_path / "k").glob("*.jsonl"))


FOREIGN_FINDER = '''
import importlib.abc, importlib.machinery, sys


class OwnLoader(importlib.abc.Loader):
    """torch executed by a loader of this environment's own, found ahead of everything else."""

    def __init__(self, real):
        self.real = real

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        self.real.exec_module(module)


class OwnFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name)
        spec.loader = OwnLoader(spec.loader)
        return spec


sys.meta_path.insert(0, OwnFinder())
'''


def test_torch_loaded_by_another_finder_ahead_of_the_meter_is_seen_at_the_next_import(tmp_path):
    own = tmp_path / "own_site"
    own.mkdir()
    (own / "sitecustomize.py").write_text(FOREIGN_FINDER)   # runs after the meter's: its finder goes first
    write(tmp_path, "helper.py", "X = 1\n")
    write(tmp_path, "train.py", "import torch\nimport helper\n" + LOOP.format(steps=4, mb=MB))
    done, r = meter(tmp_path, sys.executable, "train.py", env={"PYTHONPATH": str(own)})
    _measured_exactly(done, r)


@pytest.mark.parametrize("how, procs", [("torchrun", 1), ("torchrun", 2), ("accelerate", 1), ("accelerate", 2)])
@pytest.mark.parametrize("first", list(FIRST))
def test_programs_that_look_torch_up_first_under_every_launcher(tmp_path, first, how, procs):
    _needs(first)
    if how == "accelerate":
        pytest.importorskip("accelerate")
    write(tmp_path, "train.py", FIRST[first] + DDP.format(steps=3, mb=MB, destroy=True))
    done, r = meter(tmp_path, *launch(how, procs, "train.py"), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert r.get("error") is None, r.get("error")
    assert [(x["rank"], x["steps"]) for x in r["ranks"]] == [(rank, 3) for rank in range(procs)]
    assert r["processes"] == procs + 1   # the launcher is seen, and is no rank
    m = r["metrics"]
    assert MB <= m["step_peak_bytes"] < MB + 65536 and m["optimizer_steps"] == 3
