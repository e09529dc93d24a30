"""torch as a decision (--torch / [env] torch), what a torch costs before it is installed (uv's
resolution and the index's file sizes, on a loopback index), and which torch bases gc removes."""
from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import pytest

from bisector.envs import EnvSpec
from bisector.envs.build import torch_choice
from bisector.envs.build.torch_choice import choose_torch, valid_choice
from bisector.envs.build.torch_size import estimate
from bisector.envs.cache.gc_policy import BaseUse, select_bases
from bisector.errors import UsageError
from tests.support.pkgindex import LocalIndex, build_wheel

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


def test_no_torch_and_no_choice_stops_with_what_it_would_download(monkeypatch, index):
    url, sizes = index
    monkeypatch.setattr(torch_choice, "interpreter_torch", lambda: None)
    with pytest.raises(UsageError) as err:
        choose_torch(SPEC, None, "accelerate", url)
    text = str(err.value)
    assert "has no torch and this job does not choose one" in text and "--torch 2.0.0" in text
    assert "torch 2.0.0: a " in text and "download (the torch wheel" in text and "1 CUDA libraries" in text
    assert "\n" not in text
    with pytest.raises(UsageError, match="--torch current: bisector's interpreter"):
        choose_torch(SPEC, "current", "accelerate", url)
    assert choose_torch(SPEC, "2.0.0", "accelerate", url).base == "torch==2.0.0"  # chosen: no stop
    assert EnvSpec(name="p", base="torch==2.0.0") == choose_torch(EnvSpec(name="p", base="torch==2.0.0"), None, "x")


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
