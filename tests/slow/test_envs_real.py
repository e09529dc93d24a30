"""The slow half of tests/process/test_envs.py: its tests that build real environments and run real probes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import pytest
from bisector.data import specs_dir
from bisector.envs import EnvCache, EnvManager, EnvSpec, InstallTarget, load_env_spec
from bisector.envs.builders import backends as backends_mod
from bisector.envs.builders import builder as builder_mod
from bisector.errors import EnvironmentFailure
from tests.support.gitrepo import commit, init_repo, package_files

from tests.process.test_envs import CONCURRENT, NO_LEAK, ROOT, SCM_PYPROJECT, SPEC, _leftovers, fake_base, index, manager, release, run_in, utc, uv_cache  # noqa: F401 (helpers and fixtures)


def test_release_env_shares_torch_without_leaks_and_is_reused(manager, index):
    env = manager.ensure(SPEC, release(index, "1.0"))
    assert env.info.installed_version == "1.0" and "depy==1.0" in env.info.resolved
    assert not any(r.startswith("torch==") for r in env.info.resolved)   # torch comes from the base
    out = run_in(env, NO_LEAK)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0].startswith("1.0 1.0 ") and lines[1] == "[]"              # nothing else from the base
    start = time.perf_counter()
    again = manager.ensure(SPEC, release(index, "1.0"))
    assert time.perf_counter() - start < 0.5
    assert (again.path, again.fingerprint) == (env.path, env.fingerprint)
    assert again.info.last_used >= env.info.last_used
    assert [i.fingerprint for i in EnvCache(manager.cache_dir).list()] == [env.fingerprint]
    info = json.loads((env.path / "bisector-env.json").read_text())
    assert info["fingerprint"] == env.fingerprint and info["resolved"] == env.info.resolved


def test_dependencies_resolved_as_of_candidate_date(manager, index):
    """depy 2.0 (2022) breaks tinypkg 1.0: as of 2021 the env gets depy 1.0 and works."""
    env = manager.ensure(SPEC, release(index, "1.0", as_of=utc(2021, 2, 1)))
    assert "depy==1.0" in env.info.resolved
    with pytest.raises(EnvironmentFailure) as err:
        manager.ensure(SPEC, release(index, "1.0", as_of=utc(2022, 6, 1)))
    assert "health check failed" in str(err.value) and "old_api" in str(err.value)
    assert len(os.listdir(manager.cache_dir / "envs")) == 1 and _leftovers(manager) == []


def test_pinned_companion_installs_even_if_newer_than_as_of(manager, index):
    spec = EnvSpec(name="pinned", companions={"helper": "3.0"})
    env = manager.ensure(spec, release(index, "1.0", as_of=utc(2021, 2, 1)))
    assert "helper==3.0" in env.info.resolved and "helper" in env.info.lifted
    loose = EnvSpec(name="loose", companions={"helper": "as-of-candidate"})
    with pytest.raises(EnvironmentFailure, match="helper"):
        manager.ensure(loose, release(index, "1.0", as_of=utc(2021, 2, 1)))


def test_health_check_catches_version_mismatch(manager, index):
    with pytest.raises(EnvironmentFailure, match=r"__version__ is 1\.1"):
        manager.ensure(SPEC, release(index, "1.2"))
    assert os.listdir(manager.cache_dir / "envs") == [] and _leftovers(manager) == []


def test_resolution_failure_is_environment_failure(manager, index):
    with pytest.raises(EnvironmentFailure) as err:
        manager.ensure(SPEC, release(index, "9.9"))
    assert "tinypkg" in str(err.value) and len(str(err.value)) < 500
    with pytest.raises(EnvironmentFailure, match="base does not fit"):
        manager.ensure(SPEC, InstallTarget(package="needsnewtorch", version="1.0", index_url=index))
    assert os.listdir(manager.cache_dir / "envs") == [] and _leftovers(manager) == []


def test_commit_env_is_exactly_that_commit(manager, index, tmp_path):
    repo = init_repo(tmp_path / "repo")
    files = package_files("tinypkg", "1.1.dev0", dependencies=["depy"], module_source="MARK = 'one'\n")
    sha1 = commit(repo, files, "one", utc(2021, 3, 1))
    sha2 = commit(repo, {"tinypkg/__init__.py": '__version__ = "1.1.dev0"\nMARK = "two"\n'}, "two", utc(2021, 4, 1))
    (repo / "tinypkg" / "__init__.py").write_text("raise ImportError('uncommitted work must not be used')\n")
    envs = {}
    for sha in (sha1, sha2):
        target = InstallTarget(package="tinypkg", source=repo, revision=sha, as_of=utc(2021, 5, 1), index_url=index)
        envs[sha] = env = manager.ensure(SPEC, target)
        assert env.info.installed_revision == sha and env.info.installed_version == "1.1.dev0"
    assert run_in(envs[sha1], "import tinypkg; print(tinypkg.MARK)").stdout.strip() == "one"
    assert run_in(envs[sha2], "import tinypkg; print(tinypkg.MARK)").stdout.strip() == "two"
    wheel = next((manager.cache_dir / "wheels" / sha1).glob("*.whl"))
    mtime = wheel.stat().st_mtime_ns
    later = InstallTarget(package="tinypkg", source=repo, revision=sha1, as_of=utc(2021, 5, 2), index_url=index)
    assert manager.ensure(SPEC, later).fingerprint != envs[sha1].fingerprint
    assert wheel.stat().st_mtime_ns == mtime                                  # built once per SHA
    with pytest.raises(EnvironmentFailure, match="not in"):
        manager.ensure(SPEC, InstallTarget(package="tinypkg", source=repo, revision="c" * 40, index_url=index))


def test_two_processes_end_with_one_env(tmp_path, index):
    cache = tmp_path / "shared"
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, str(cache), index], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    results = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
    assert results[0] == results[1]                                           # same dir, built once
    assert len(os.listdir(cache / "envs")) == 1 and os.listdir(cache / "tmp") == []


def test_damaged_envs_are_rebuilt(manager, index):
    env = manager.ensure(SPEC, release(index, "1.1"))
    shutil.rmtree(env.path / env.info.dist_info.rsplit("/", 1)[0] / "tinypkg")   # half-deleted
    rebuilt = manager.ensure(SPEC, release(index, "1.1"))
    assert rebuilt.info.created > env.info.created and run_in(rebuilt, "import tinypkg").returncode == 0
    python = rebuilt.path / "bin" / "python"
    python.unlink()
    python.write_text("#!/bin/sh\nexit 1\n")                                  # interpreter no longer runs
    python.chmod(0o755)
    again = manager.ensure(SPEC, release(index, "1.1"))
    assert again.info.created > rebuilt.info.created and run_in(again, "import tinypkg").returncode == 0
    (again.path / "bisector-env.json").unlink()                                # interrupted / no info
    last = manager.ensure(SPEC, release(index, "1.1"))
    assert last.info.created > again.info.created
    stale = last.info.model_copy(update={"interpreter": last.info.interpreter.model_copy(update={"mtime_ns": 1})})
    (last.path / "bisector-env.json").write_text(stale.model_dump_json())     # interpreter changed: recheck
    kept = manager.ensure(SPEC, release(index, "1.1"))
    assert kept.info.created == last.info.created and kept.info.interpreter == last.info.interpreter


def test_gc_keep_last_and_max_size(manager, index):
    envs = [manager.ensure(SPEC, release(index, "1.0", as_of=utc(2021, 2, d))) for d in (1, 2, 3)]
    manager.ensure(SPEC, release(index, "1.0", as_of=utc(2021, 2, 1)))        # most recently used now
    removed = EnvCache(manager.cache_dir).gc(keep_last=2)
    assert [i.fingerprint for i in removed] == [envs[1].fingerprint]
    assert not envs[1].path.exists() and envs[0].path.exists() and envs[2].path.exists()
    keep = EnvCache(manager.cache_dir).list()[0]
    removed = EnvCache(manager.cache_dir).gc(max_size=keep.size_bytes)
    assert [i.fingerprint for i in removed] == [envs[2].fingerprint]
    assert [i.fingerprint for i in EnvCache(manager.cache_dir).list()] == [envs[0].fingerprint]
    cache = EnvCache(manager.cache_dir)
    assert cache.gc(max_size=0)[0].fingerprint == envs[0].fingerprint and cache.list() == []


def test_prefetch_builds_in_background_without_duplicates(manager, index, monkeypatch):
    calls: list[str] = []
    real_build = builder_mod.build

    def counting_build(recipe, *args, **kwargs):
        calls.append(recipe.fingerprint)
        return real_build(recipe, *args, **kwargs)

    monkeypatch.setattr(builder_mod, "build", counting_build)
    targets = [release(index, "1.0", as_of=utc(2021, 3, 1)), release(index, "1.1", as_of=utc(2021, 7, 1))]
    manager.prefetch(SPEC, targets)
    first = manager.ensure(SPEC, targets[0])
    assert manager.wait_prefetch(timeout=120)
    second = manager.ensure(SPEC, targets[1])
    assert sorted(calls) == sorted({first.fingerprint, second.fingerprint})   # each built exactly once


def test_falls_back_to_virtualenv_pip_when_uv_is_unusable(tmp_path, index, uv_cache, monkeypatch, caplog):
    monkeypatch.setattr(backends_mod.UvBackend, "unusable", lambda self: "uv not found (test)")
    manager = EnvManager(tmp_path / "cache")
    spec = EnvSpec(name="pip", companions={"helper": "3.0"})
    env = manager.ensure(spec, release(index, "1.0", as_of=utc(2021, 2, 1)))
    assert env.info.backend == "virtualenv" and "depy==1.0" in env.info.resolved and "helper==3.0" in env.info.resolved
    assert not any(r.startswith("torch==") for r in env.info.resolved)
    out = run_in(env, NO_LEAK)
    assert out.returncode == 0 and out.stdout.split("\n")[1] == "[]", out.stderr
    assert "falling back to virtualenv + pip" in caplog.text


def test_path_base_overlay_and_torch_constraints(tmp_path, index, fake_base):
    """The candidate sees the base's torch closure only; a dated fakedep 1.0 that misses
    torch's fakedep>=2 is re-resolved to a newer release."""
    manager = EnvManager(tmp_path / "cache")
    spec = EnvSpec(name="fake", base=str(fake_base))
    target = InstallTarget(package="usesdep", version="1.0", as_of=utc(2021, 2, 1), index_url=index)
    env = manager.ensure(spec, target)
    assert env.info.provided == {"nvidia-fake": "1.0", "torch": "1.0"}
    assert "fakedep==2.0" in env.info.resolved and "fakedep" in env.info.lifted
    assert "nvidia-ml-py==1.0" in env.info.resolved  # a CUDA torch's candidates get NVML for the probe
    code = ("import importlib.util as u, importlib.metadata as md, torch, nvidia_fake, fakedep\n"
            "print(md.version('torch'), fakedep.__file__.split('/')[-3], u.find_spec('leaky'))")
    out = run_in(env, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1.0", "site-packages", "None"]


def test_torch_version_base_is_built_once_with_pip(tmp_path, index):
    manager = EnvManager(tmp_path / "cache")
    spec = EnvSpec(name="tb", base="torch==1.0", index_url=index)
    env = manager.ensure(spec, InstallTarget(package="usesdep", version="1.0", as_of=utc(2021, 2, 1)))
    assert env.info.provided["torch"] == "1.0"
    bases = [p for p in (tmp_path / "cache" / "bases").iterdir() if p.is_dir()]
    assert len(bases) == 1 and (bases[0] / "bisector-base.json").exists()
    assert run_in(env, "import torch, usesdep").returncode == 0


@pytest.mark.skipif(os.environ.get("BISECTOR_NETWORK_TESTS") != "1", reason="needs the real package index")
def test_default_spec_builds_old_accelerate(tmp_path):
    """accelerate 0.20.3 as of its upload, transformers as of then, torch from the base."""
    manager = EnvManager(tmp_path / "cache")
    spec = load_env_spec("default", specs_dir())
    target = InstallTarget(package="accelerate", version="0.20.3", as_of=utc(2023, 6, 8, 16, 16, 34))
    env = manager.ensure(spec, target)
    out = run_in(env, "import accelerate, transformers, torch, pkg_resources; print(transformers.GPTNeoXConfig)")
    assert out.returncode == 0, out.stderr
    assert any(r.startswith("transformers==4.30") for r in env.info.resolved)


def test_commit_of_a_setuptools_scm_package_builds_with_its_git_version(manager, index, tmp_path):
    """`git archive` has no .git; the build still gets the version git gives that commit."""
    repo = init_repo(tmp_path / "repo")
    files = {"pyproject.toml": SCM_PYPROJECT, "scmpkg/__init__.py": "MARK = 'one'\n"}
    tagged = commit(repo, files, "one", utc(2021, 3, 1))
    subprocess.run(["git", "-C", str(repo), "tag", "v1.4.0"], check=True)
    commit(repo, {"scmpkg/__init__.py": "MARK = 'two'\n"}, "two", utc(2021, 3, 2))
    later = commit(repo, {"scmpkg/__init__.py": "MARK = 'three'\n"}, "three", utc(2021, 3, 3))
    for sha, version, mark in ((tagged, "1.4.0", "one"), (later, f"1.4.1.dev2+g{later[:12]}", "three")):
        target = InstallTarget(package="scmpkg", source=repo, revision=sha, as_of=utc(2021, 5, 1), index_url=index)
        env = manager.ensure(SPEC, target)
        assert env.info.installed_revision == sha and env.info.installed_version == version
        assert run_in(env, "import scmpkg; print(scmpkg.MARK)").stdout.strip() == mark
