"""The package index comes from pip's and uv's own configuration files, read without pip: bisector runs
where no pip is importable (uv tool, pipx). Real files in a temporary HOME and XDG dirs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bisector.sources import installer_config as ic

ROOT = Path(__file__).resolve().parents[2]
VARS = ("PIP_CONFIG_FILE", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "UV_DEFAULT_INDEX",
        "UV_INDEX_URL", "UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_CONFIG_FILE", "UV_NO_CONFIG")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty HOME, XDG dirs under it, and none of the installers' variables."""
    for var in VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "xdg"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    monkeypatch.setattr(ic, "pip_config_files", _without_etc(ic.pip_config_files))
    ic.default_index_url.cache_clear()
    yield tmp_path
    ic.default_index_url.cache_clear()


def _without_etc(files):
    """pip's list without /etc/pip.conf (this machine's own would leak into the test)."""
    return lambda: [p for p in files() if p != Path("/etc/pip.conf")]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_pip_files_in_pips_order_install_over_global_and_variables_last(home, monkeypatch):
    write(home / "xdg" / "pip" / "pip.conf", "[global]\nindex-url = http://global.example/simple\n")
    write(home / "config" / "pip" / "pip.conf",
          "[global]\nindex_url = http://user.example/simple\nfind-links = /w1 /w2\n"
          "[install]\nextra-index-url = http://extra.example/simple\n    http://extra2.example/simple\n")
    s = ic.pip_settings()
    assert s.index_url == "http://user.example/simple"            # the user's file over the global one
    assert s.extra_index_urls == ["http://extra.example/simple", "http://extra2.example/simple"]
    assert s.find_links == ["/w1", "/w2"]
    write(Path(sys.prefix) / "pip.conf", "[install]\nindex-url = http://site.example/simple\n")
    assert ic.pip_settings().index_url == "http://site.example/simple"     # the site (venv) file wins
    monkeypatch.setenv("PIP_INDEX_URL", "http://env.example/simple")
    assert ic.pip_settings().index_url == "http://env.example/simple"      # variables over every file


def test_pip_config_file_variable_replaces_the_user_files_and_devnull_turns_files_off(home, monkeypatch):
    write(home / "config" / "pip" / "pip.conf", "[global]\nindex-url = http://user.example/simple\n")
    named = write(home / "mine.conf", "[global]\nfind-links = /mine\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(named))
    s = ic.pip_settings()
    assert s.index_url is None and s.find_links == ["/mine"]
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    assert ic.pip_config_files() == [] and ic.pip_settings().find_links == []


def test_uv_files_user_over_system_default_index_and_variables(home, monkeypatch):
    write(home / "xdg" / "uv" / "uv.toml", 'index-url = "http://system.example/simple"\n')
    assert ic.uv_settings().index_url == "http://system.example/simple"
    write(home / "config" / "uv" / "uv.toml",
          '[[index]]\nurl = "http://extra.example/simple"\n\n'
          '[[index]]\nurl = "http://user.example/simple"\ndefault = true\n\n[pip]\nfind-links = ["/w"]\n')
    s = ic.uv_settings()
    assert (s.index_url, s.extra_index_urls, s.find_links) == ("http://user.example/simple",
                                                                ["http://extra.example/simple"], ["/w"])
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://env.example/simple")
    assert ic.uv_settings().index_url == "http://env.example/simple"
    monkeypatch.delenv("UV_DEFAULT_INDEX")
    monkeypatch.setenv("UV_NO_CONFIG", "1")
    assert ic.uv_settings().index_url is None


def test_the_primary_index_uv_first_then_pip_then_the_installers_default(home, monkeypatch):
    assert ic.default_index_url() == ic.installers_default()
    assert ic.installers_default().startswith("https://")                  # as uv's help states it
    ic.default_index_url.cache_clear()
    write(home / "config" / "pip" / "pip.conf", "[global]\nindex-url = http://pip.example/simple\n")
    assert ic.default_index_url() == "http://pip.example/simple"
    ic.default_index_url.cache_clear()
    write(home / "config" / "uv" / "uv.toml", 'index-url = "http://uv.example/simple"\n')
    assert ic.default_index_url() == "http://uv.example/simple"
    assert ic.resolve_index_url(" http://given.example/simple ") == "http://given.example/simple"


def test_without_an_importable_pip_the_index_is_still_found(tmp_path):
    """What a `uv tool install` sees: `import pip` fails; the files and uv's default still answer."""
    write(tmp_path / "config" / "pip" / "pip.conf", "[global]\nindex-url = http://pip.example/simple\n")
    code = ("import sys; sys.modules['pip'] = None\n"
            "from bisector.sources import installer_config as ic\n"
            "print(ic.default_index_url()); print(ic.installers_default())")
    env = {k: v for k, v in os.environ.items() if k not in VARS}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    configured, default = out.stdout.split()
    assert configured == "http://pip.example/simple" and default.startswith("https://")
