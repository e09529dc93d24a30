"""Tests for bisector.envs: real environments, real uv, a loopback index, no PyPI.

Fast unit tests first; the ones that build environments are marked slow (they run in CI).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

from bisector.data import specs_dir
from bisector.envs import EnvInfo, EnvManager, EnvSpec, InstallTarget, load_env_spec
from bisector.envs.builders.commit_wheels import REVISION_FILE, stamp_wheel
from bisector.envs.builders.scm_version import commit_version, pretend_version_env
from bisector.envs.model.environment import Environment
from bisector.envs.cache.gc_policy import select_for_removal
from bisector.envs.model.info import InterpreterStamp
from bisector.envs.builders.overlay import choose
from bisector.envs.tooling.tool_runs import short_reason
from bisector.envs.model.env_spec import companion_requirement
from bisector.errors import UsageError
from tests.support import LocalIndex, build_wheel
from tests.support.gitrepo import commit, init_repo

ROOT = Path(__file__).resolve().parents[2]


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.timezone.utc)


def run_in(env: Environment, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(env.python), "-c", code], env=env.run_env(), capture_output=True, text=True)


# ---------------------------------------------------------------- spec loading (fast)

def test_default_spec_loads():
    spec = load_env_spec("default", specs_dir())
    assert spec.base == "current" and spec.companions == {"accelerate": "as-of-candidate",
                                                         "transformers": "as-of-candidate"}
    assert "setuptools" in spec.requirements and spec.backend == "uv"


@pytest.mark.parametrize("body, key", [
    ('base = "current"\nbogus = 1\n', "bogus"),
    ('companions = {transformers = "not a version!"}\n', "companions.transformers"),
    ('requirements = ["numpy >>> 1"]\n', "requirements.0"),
    ('base = "torch==not.a.version"\n', "base"),
    ('env_vars = {PYTHONPATH = "/x"}\n', "env_vars"),
    ('backend = "conda"\n', "backend"),
    ('index_url = "ftp://host/simple"\n', "index_url"),
])
def test_spec_errors_name_file_and_key(tmp_path, body, key):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(UsageError) as err:
        load_env_spec("bad", tmp_path)
    message = str(err.value)
    assert str(path) in message and f"'{key}'" in message and "\n" not in message


def test_spec_missing_and_invalid_toml(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        load_env_spec("nope", tmp_path)
    (tmp_path / "broken.toml").write_text("base = \n")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_env_spec(str(tmp_path / "broken.toml"), tmp_path)


def test_spec_relative_base_path_and_torch_base(tmp_path):
    (tmp_path / "mybase").mkdir()
    (tmp_path / "a.toml").write_text('base = "mybase"\n')
    assert load_env_spec("a", tmp_path).base == str((tmp_path / "mybase").resolve())
    spec = EnvSpec(name="t", base="torch == 2.13.0")
    assert spec.base == "torch==2.13.0" and spec.torch_base_version == "2.13.0"


def test_companion_values():
    assert companion_requirement("transformers", "as-of-candidate") == ("transformers", False)
    assert companion_requirement("transformers", "4.32.1") == ("transformers==4.32.1", True)
    assert companion_requirement("transformers", "==4.32.1") == ("transformers==4.32.1", True)
    assert companion_requirement("transformers", ">=4.30,<4.35")[1] is False
    with pytest.raises(ValueError):
        companion_requirement("bad name!", "1.0")


def test_install_target_validation(tmp_path):
    InstallTarget(package="accelerate", version="0.22.0")
    InstallTarget(package="accelerate", source=tmp_path, revision="a" * 40)
    for bad in [dict(package="x;rm", version="1"), dict(package="x", version="1", source=tmp_path),
                dict(package="x", source=tmp_path, revision="abc"), dict(package="x"),
                dict(package="x", version="not-a-version")]:
        with pytest.raises(ValueError):
            InstallTarget(**bad)
    naive = InstallTarget(package="x", version="1", as_of=dt.datetime(2023, 1, 1))
    assert naive.as_of.tzinfo is not None


# ---------------------------------------------------------------- pure helpers (fast)

def _info(name: str, used: int, size: int) -> EnvInfo:
    stamp = InterpreterStamp(realpath="/p", size=1, mtime_ns=1)
    moment = utc(2024, 1, 1) + dt.timedelta(hours=used)
    return EnvInfo(fingerprint=name, dir_name=name, spec_name="s",
                   target=InstallTarget(package="p", version="1"), installed_version="1",
                   dist_info="d", resolved=[], base="current", base_fingerprint="b", python_version="3",
                   interpreter=stamp, backend="uv", created=moment, last_used=moment, size_bytes=size)


def test_gc_selection():
    infos = [_info("a", 1, 10), _info("b", 3, 10), _info("c", 2, 10)]
    assert [i.fingerprint for i in select_for_removal(infos, keep_last=1)] == ["a", "c"]
    assert [i.fingerprint for i in select_for_removal(infos, max_size=25)] == ["a"]
    assert [i.fingerprint for i in select_for_removal(infos, keep_last=2, max_size=5)] == ["a", "c", "b"]
    assert select_for_removal(infos) == []


def test_overlay_choose_links_whole_or_recurses_into_shared_dirs():
    items = [
        (("torch", "__init__.py"), "torch"), (("torch", "lib", "x.so"), "torch"),
        (("nvidia", "cublas", "lib.so"), "nvidia-cublas"), (("nvidia", "other", "lib.so"), "not-closure"),
        (("leaky", "__init__.py"), "leaky"), (("te.py",), "typing-extensions"),
    ]
    closure = {"torch", "nvidia-cublas", "typing-extensions"}
    assert choose((), items, closure) == [("nvidia", "cublas"), ("te.py",), ("torch",)]


def test_short_reason_keeps_last_meaningful_lines():
    text = "Using Python 3.11 environment at: x\n  × No solution found\n  ╰─▶ Because a==1 was not found\n\n"
    assert short_reason(text) == "No solution found | Because a==1 was not found"


def test_run_env_drops_redirecting_variables(monkeypatch, tmp_path):
    for var in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE"):
        monkeypatch.setenv(var, "/elsewhere")
    env = Environment(path=tmp_path, python=tmp_path / "bin" / "python", fingerprint="f",
                      info=_info("f", 0, 0), env_vars={"CUDA_VISIBLE_DEVICES": ""}).run_env()
    assert not {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE"} & set(env)
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path / "bin")
    assert env["VIRTUAL_ENV"] == str(tmp_path) and env["PYTHONNOUSERSITE"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_stamp_wheel_adds_revision_to_record(tmp_path):
    wheel = build_wheel(tmp_path, "tinypkg", "1.0")
    stamp_wheel(wheel, "b" * 40)
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read(f"tinypkg-1.0.dist-info/{REVISION_FILE}").decode().strip() == "b" * 40
        assert f"tinypkg-1.0.dist-info/{REVISION_FILE},sha256=" in zf.read("tinypkg-1.0.dist-info/RECORD").decode()


def test_local_index_serves_pep691_json_and_html(tmp_path):
    idx = LocalIndex(tmp_path / "idx")
    idx.add(build_wheel(tmp_path / "w", "Tiny_Pkg", "1.0"), utc(2021, 1, 1))
    idx.add(build_wheel(tmp_path / "w", "Tiny_Pkg", "1.1"), utc(2021, 2, 1), yanked="broken")
    with idx.serve() as url:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/simple/")
        req = urllib.request.Request(url + "tiny-pkg/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(req) as resp:
            doc = json.load(resp)
        assert doc["meta"]["api-version"] == "1.1" and doc["versions"] == ["1.0", "1.1"]
        files = {f["filename"]: f for f in doc["files"]}
        assert files["tiny_pkg-1.0-py3-none-any.whl"]["upload-time"] == "2021-01-01T00:00:00.000000Z"
        assert files["tiny_pkg-1.1-py3-none-any.whl"]["yanked"] == "broken"
        with urllib.request.urlopen(url + "tiny-pkg/") as resp:
            assert 'data-yanked="broken"' in resp.read().decode()
        with urllib.request.urlopen(url.replace("simple/", "files/") + "tiny_pkg-1.0-py3-none-any.whl") as resp:
            assert resp.read()[:2] == b"PK"


# ---------------------------------------------------------------- real environments (slow)

@pytest.fixture(scope="module")
def uv_cache(tmp_path_factory):
    """A private uv cache on the same filesystem as the env caches (hard links work)."""
    path = tmp_path_factory.mktemp("uv-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("UV_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def index(tmp_path_factory, uv_cache):
    """A loopback index: depy 2.0 (2022) drops the API tinypkg 1.0/1.1 (2021) use."""
    root = tmp_path_factory.mktemp("index")
    wheels, idx = root / "wheels", LocalIndex(root / "idx")
    add = lambda wheel, when: idx.add(wheel, when)  # noqa: E731
    add(build_wheel(wheels, "depy", "1.0", module_source="def old_api():\n    return 1\n"), utc(2020, 1, 1))
    add(build_wheel(wheels, "depy", "2.0", module_source="def new_api():\n    return 2\n"), utc(2022, 1, 1))
    use_depy = "from depy import old_api\n"
    add(build_wheel(wheels, "tinypkg", "1.0", dependencies=["depy"], module_source=use_depy), utc(2021, 1, 1))
    add(build_wheel(wheels, "tinypkg", "1.1", dependencies=["depy"], module_source=use_depy), utc(2021, 6, 1))
    liar = '__version__ = "1.1"  # the wheel says 1.2, the code says 1.1\n'
    add(build_wheel(wheels, "tinypkg", "1.2", module_source=liar), utc(2021, 7, 1))
    add(build_wheel(wheels, "helper", "3.0"), utc(2023, 1, 1))
    add(build_wheel(wheels, "needsnewtorch", "1.0", dependencies=["torch>=99"]), utc(2021, 1, 1))
    # a fake torch for fake bases: needs fakedep>=2 (2022) and a fake CUDA lib
    add(build_wheel(wheels, "torch", "1.0", dependencies=["fakedep>=2", "nvidia-fake"]), utc(2020, 1, 1))
    add(build_wheel(wheels, "fakedep", "1.0"), utc(2020, 1, 1))
    add(build_wheel(wheels, "fakedep", "2.0"), utc(2022, 1, 1))
    add(build_wheel(wheels, "nvidia-fake", "1.0"), utc(2020, 1, 1))
    add(build_wheel(wheels, "nvidia-ml-py", "1.0"), utc(2020, 1, 1))  # NVML's bindings, for CUDA bases
    add(build_wheel(wheels, "leaky", "1.0"), utc(2020, 1, 1))
    add(build_wheel(wheels, "usesdep", "1.0", dependencies=["fakedep", "torch>=0.5"]), utc(2021, 1, 1))
    with idx.serve() as url:
        yield url


@pytest.fixture
def manager(tmp_path, uv_cache):
    return EnvManager(tmp_path / "cache")


MID_2021 = utc(2021, 7, 15)


def release(url: str, version: str = "1.0", as_of: dt.datetime = MID_2021) -> InstallTarget:
    return InstallTarget(package="tinypkg", version=version, as_of=as_of, index_url=url)


SPEC = EnvSpec(name="test")
NO_LEAK = """
import importlib.util as u, tinypkg, depy, torch
print(tinypkg.__version__, depy.__version__, torch.__version__)
print([m for m in ("pydantic", "hypothesis", "uv", "leaky") if u.find_spec(m)])
"""


def _leftovers(manager: EnvManager) -> list[str]:
    tmp = manager.cache_dir / "tmp"
    return sorted(os.listdir(tmp)) if tmp.exists() else []


CONCURRENT = """
import datetime as dt, json, sys
from pathlib import Path
from bisector.envs import EnvManager, EnvSpec, InstallTarget
target = InstallTarget(package="tinypkg", version="1.1", index_url=sys.argv[2],
                       as_of=dt.datetime(2021, 7, 15, tzinfo=dt.timezone.utc))
env = EnvManager(Path(sys.argv[1])).ensure(EnvSpec(name="test"), target)
print(json.dumps({"path": str(env.path), "created": env.info.created.isoformat()}))
"""


@pytest.fixture(scope="module")
def fake_base(tmp_path_factory, index):
    """A base venv with a fake torch (needs fakedep>=2 and nvidia-fake) plus an unrelated 'leaky'."""
    prefix = tmp_path_factory.mktemp("fakebase") / "venv"
    subprocess.run([sys.executable, "-m", "uv", "venv", "-q", "--python", sys.executable, str(prefix)], check=True)
    subprocess.run([sys.executable, "-m", "uv", "pip", "install", "-q", "--python", str(prefix / "bin" / "python"),
                    "--default-index", index, "torch==1.0", "leaky"], check=True)
    return prefix


# ---------------------------------------------------------------- git-versioned packages

def test_commit_version_follows_the_nearest_version_tag(tmp_path):
    repo = init_repo(tmp_path / "repo")
    shas = [commit(repo, {"f.txt": str(i)}, f"c{i}", utc(2021, 1, 1 + i)) for i in range(6)]
    assert commit_version(repo, shas[0]) == f"0.1.dev0+g{shas[0][:12]}"   # no tag yet
    subprocess.run(["git", "-C", str(repo), "tag", "v1.4.0", shas[1]], check=True)
    subprocess.run(["git", "-C", str(repo), "tag", "nightly", shas[2]], check=True)  # not a version: ignored
    subprocess.run(["git", "-C", str(repo), "tag", "2.0rc1", shas[4]], check=True)
    assert commit_version(repo, shas[1]) == "1.4.0"
    assert commit_version(repo, shas[3]) == f"1.4.1.dev2+g{shas[3][:12]}"
    assert commit_version(repo, shas[5]) == f"2.0rc2.dev1+g{shas[5][:12]}"
    env = pretend_version_env("My.Pkg", "1.0")
    assert env["SETUPTOOLS_SCM_PRETEND_VERSION_FOR_MY_PKG"] == "1.0" == env["SETUPTOOLS_SCM_PRETEND_VERSION"]


SCM_PYPROJECT = """
[build-system]
requires = ["setuptools>=64", "setuptools-scm>=8"]
build-backend = "setuptools.build_meta"

[project]
name = "scmpkg"
dynamic = ["version"]

[tool.setuptools_scm]

[tool.setuptools.packages.find]
include = ["scmpkg*"]
"""


def test_package_under_test_replaces_its_companion(manager, index):
    """Bisecting transformers with the default spec (transformers = "as-of-candidate") just works."""
    spec = EnvSpec(name="t", companions={"TinyPkg": "as-of-candidate", "depy": "==1.0"})
    recipe = manager.recipe(spec, InstallTarget(package="tinypkg", version="1.0", index_url=index))
    assert recipe.extra_requirements == ["depy==1.0"]
    with pytest.raises(UsageError, match="tinypkg is the package under test"):
        manager.recipe(EnvSpec(name="t", requirements=["tinypkg>=1"]),
                       InstallTarget(package="tinypkg", version="1.0", index_url=index))


def test_a_wrapped_resolver_explanation_is_kept_from_its_first_because():
    """uv wraps its explanation over as many lines as it needs: the clause naming the packages in conflict
    is its first, and the last four lines alone lose it (a matrix cell then said only 'you require ...')."""
    text = ("Using Python 3.11 environment at: x\n  × No solution found when resolving dependencies:\n"
            "  ╰─▶ Because only tinyhelper==1.0.0 is available and tinyhelper==1.0.0 depends on\n"
            "      tinyextra>=2, we can conclude that all versions of tinyhelper depend on tinyextra>=2.\n"
            "      And because tinypkg>=1.2.0 depends on tinyhelper, we can conclude that\n"
            "      tinypkg>=1.2.0 depends on tinyextra>=2.\n"
            "      And because you require tinypkg==1.2.0 and tinyextra==1.0.0, we can\n"
            "      conclude that your requirements are unsatisfiable.\n")
    reason = short_reason(text)
    assert reason.startswith("No solution found when resolving dependencies: | Because only tinyhelper==1.0.0")
    assert reason.endswith("conclude that your requirements are unsatisfiable.")
    pip = ("ERROR: Cannot install a==1 and b==2 because these package versions have conflicting dependencies.\n\n"
           "The conflict is caused by:\n    a 1 depends on c>=2\n    b 2 depends on c<2\n\n"
           "To fix this you could try to:\n1. loosen the range\n\n"
           "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/\n")
    assert short_reason(pip).startswith("ERROR: Cannot install a==1 and b==2 because")
    assert "a 1 depends on c>=2 | b 2 depends on c<2" in short_reason(pip)
