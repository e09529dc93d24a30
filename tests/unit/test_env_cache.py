"""The environment cache's shared pieces, on a real file system: build_once (the one way wheels,
overlays, torch bases and environments are built), the cache layout and specs laid over each other."""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from bisector.envs import EnvCache, EnvSpec
from bisector.envs.model.layout import CacheLayout
from bisector.envs.builders.once import build_once
from bisector.errors import EnvironmentFailure


def _thing(dest):
    return dest if (dest / "done").is_file() else None


def test_build_once_builds_exactly_once_across_threads(tmp_path):
    layout, dest, calls = CacheLayout(tmp_path).create(), tmp_path / "things" / "x", []
    lock = threading.Lock()

    def build(staging):
        with lock:
            calls.append(staging)
        time.sleep(0.2)
        staging.mkdir()
        (staging / "done").write_text("1")

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: build_once(layout, "x", dest, lambda: _thing(dest), build), range(4)))
    assert got == [dest] * 4 and len(calls) == 1
    assert calls[0].parent.parent == layout.tmp and os.listdir(layout.tmp) == []   # built aside, then renamed
    assert build_once(layout, "x", dest, lambda: _thing(dest), lambda s: calls.append(s)) == dest and len(calls) == 1


def test_build_once_replaces_a_broken_leftover_and_leaves_nothing_when_building_fails(tmp_path):
    layout, dest = CacheLayout(tmp_path).create(), tmp_path / "things" / "x"
    dest.mkdir(parents=True)
    (dest / "half").write_text("a killed build left this")

    def fail(staging):
        staging.mkdir()
        raise EnvironmentFailure("resolution failed")

    with pytest.raises(EnvironmentFailure, match="resolution failed"):
        build_once(layout, "x", dest, lambda: _thing(dest), fail)
    assert not dest.exists() and os.listdir(layout.tmp) == []

    def nothing(staging):
        staging.mkdir()

    with pytest.raises(EnvironmentFailure, match="x was built but is not usable"):
        build_once(layout, "x", dest, lambda: _thing(dest), nothing)


def test_the_cache_layout_has_no_nested_envs_dir(tmp_path):
    layout = CacheLayout(tmp_path / "cache").create()
    assert layout.env_dir("tinypkg-1.0-abc") == tmp_path / "cache" / "envs" / "tinypkg-1.0-abc"
    assert sorted(os.listdir(tmp_path / "cache")) == ["envs", "locks", "tmp"]
    assert EnvCache(tmp_path / "cache").list() == [] and EnvCache(tmp_path / "cache").bases() == []


def test_companions_laid_over_a_spec():
    spec = EnvSpec(name="s", companions={"Accelerate": "as-of-candidate", "transformers": "==4.30.2"})
    laid = spec.over({"accelerate": "==0.27.2", "torch": "==2.3.0"}, "https://idx.example/simple")
    assert laid.companions == {"transformers": "==4.30.2", "accelerate": "==0.27.2"}
    assert laid.base == "torch==2.3.0" and laid.index_url == "https://idx.example/simple"
    own_index = EnvSpec(name="s", index_url="https://own.example/simple").over({"torch": "2.3.0"}, "https://x/simple")
    assert own_index.base == "torch==2.3.0" and own_index.index_url == "https://own.example/simple"
    assert spec.over({}, drop=("transformers",)).companions == {"Accelerate": "as-of-candidate"}
    assert spec.over({}) == spec


def test_envs_list_and_gc_each_have_their_own_flags_and_help(tmp_path, capsys):
    from bisector.cli.main import main
    assert main(["envs", "gc", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: bisector envs gc")
    assert "--keep-last N" in out and "Remove cached environments" in out and "bisector envs gc --older-than 14d" in out
    assert main(["envs", "list", "--keep-last", "1", "--cache-dir", str(tmp_path)]) == 2   # a gc-only flag
    assert capsys.readouterr().err == "bisector: error: unrecognized arguments: --keep-last 1 (see --help)\n"
    assert main(["envs", "--cache-dir", str(tmp_path), "list"]) == 0                      # either side of the action
    assert main(["envs", "list", "--cache-dir", str(tmp_path)]) == 0
    assert main(["envs", "gc", "--cache-dir", str(tmp_path)]) == 2
    assert "envs gc needs --keep-last N" in capsys.readouterr().err
