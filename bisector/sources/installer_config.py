"""Where package indexes are, read from the installers' own configuration files: no pip is needed.

bisector may run where no pip is importable (``uv tool install``, some ``pipx`` venvs), so pip's and
uv's configuration is read here directly, from the locations and variables their documentation names.

The primary index (where releases are listed) is, first found:

1. an explicit URL (``--index-url``, an env spec's ``index_url``);
2. uv's variables ``UV_DEFAULT_INDEX``, ``UV_INDEX_URL``, then uv's configuration files: ``UV_CONFIG_FILE``,
   else the user's ``uv.toml`` over the system's (``[[index]]`` with ``default = true``, ``[pip] index-url``,
   ``index-url``); ``UV_NO_CONFIG`` turns the files off. (A project's ``uv.toml`` is not read: bisector
   runs uv inside its cache, where uv does not see it either.) uv builds the candidate environments, so
   its settings come first;
3. pip's ``PIP_INDEX_URL``, then pip's files (``PIP_CONFIG_FILE``, global, user, site; ``[install]`` over
   ``[global]``; ``PIP_CONFIG_FILE=/dev/null`` turns them off);
4. the installers' built-in default, as uv states it (``uv pip install --help``: "by default: <URL>"),
   or pip's own when pip is importable.
"""
from __future__ import annotations

import configparser
import functools
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Optional

import platformdirs
from pydantic import BaseModel

from bisector.errors import UsageError
from bisector.safety import safe_toml

WINDOWS = sys.platform.startswith("win")
PIP_BASENAME = "pip.ini" if WINDOWS else "pip.conf"


class IndexSettings(BaseModel):
    """One installer's index settings, as its configuration gives them (None / empty: not set)."""

    index_url: Optional[str] = None
    extra_index_urls: list[str] = []
    find_links: list[str] = []
    sources: list[str] = []          # the files and variables the settings were read from


# -- pip --------------------------------------------------------------------------------------------
def pip_config_files() -> list[Path]:
    """pip's configuration files in the order pip loads them (later ones win): global, user, site, and
    ``PIP_CONFIG_FILE``; none when that variable names the null device; no user files when it names a
    file that exists (pip's rules)."""
    env_file = os.environ.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return []
    if WINDOWS:
        global_dirs = [Path(platformdirs.site_config_dir("pip", appauthor=False))]
    else:
        xdg = os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
        global_dirs = [Path(d) / "pip" for d in xdg.split(os.pathsep) if d] + [Path("/etc")]
    files = [d / PIP_BASENAME for d in global_dirs]
    if not (env_file and os.path.exists(env_file)):
        legacy = Path.home() / ("pip" if WINDOWS else ".pip") / PIP_BASENAME
        files += [legacy, Path(platformdirs.user_config_dir("pip", appauthor=False, roaming=True)) / PIP_BASENAME]
    files.append(Path(sys.prefix) / PIP_BASENAME)
    if env_file:
        files.append(Path(env_file))
    return files


def _pip_key(key: str) -> str:
    return key.lower().replace("_", "-").removeprefix("--")


def pip_settings() -> IndexSettings:
    """pip's index settings for ``pip install``: its files (``[install]`` over ``[global]``), then its
    ``PIP_*`` variables."""
    values: dict[str, str] = {}
    sources = []
    for path in pip_config_files():
        parser = configparser.RawConfigParser()
        try:
            if not parser.read(path, encoding="utf-8"):
                continue
        except (configparser.Error, UnicodeDecodeError, OSError):
            continue
        for section in ("global", "install"):
            if parser.has_section(section):
                found = {_pip_key(k): v for k, v in parser.items(section)}
                wanted = {k: v for k, v in found.items() if k in ("index-url", "extra-index-url", "find-links")}
                if wanted:
                    sources.append(f"{path} [{section}]")
                values.update(wanted)
    for key in ("index-url", "extra-index-url", "find-links"):
        var = "PIP_" + key.upper().replace("-", "_")
        if os.environ.get(var, "").strip():
            values[key] = os.environ[var]
            sources.append(var)
    index = values.get("index-url", "").split()
    return IndexSettings(index_url=index[0] if index else None,
                         extra_index_urls=values.get("extra-index-url", "").split(),
                         find_links=values.get("find-links", "").split(), sources=sources)


# -- uv ---------------------------------------------------------------------------------------------
def uv_config_files() -> list[Path]:
    """uv's configuration files that apply to bisector's uv runs, lowest precedence first: the system's
    ``uv.toml`` (the first of ``$XDG_CONFIG_DIRS/uv``, ``/etc/uv``) and the user's, or only ``UV_CONFIG_FILE``; none with ``UV_NO_CONFIG``."""
    if os.environ.get("UV_NO_CONFIG"):
        return []
    if os.environ.get("UV_CONFIG_FILE"):
        return [Path(os.environ["UV_CONFIG_FILE"])]
    if WINDOWS:
        system = [Path(platformdirs.site_config_dir("uv", appauthor=False))]
        user = Path(os.environ.get("APPDATA") or Path.home()) / "uv"
    else:
        xdg = os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
        system = [Path(d) / "uv" for d in xdg.split(os.pathsep) if d] + [Path("/etc/uv")]
        user = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "uv"
    first_system = next((d / "uv.toml" for d in system if (d / "uv.toml").is_file()), None)  # uv reads one
    return [*([first_system] if first_system else []), user / "uv.toml"]


def _uv_table(data: dict) -> dict[str, object]:
    """The index settings of one uv.toml: top-level keys, ``[pip]`` over them, ``[[index]]`` entries."""
    out: dict[str, object] = {}
    for table in (data, data.get("pip") or {}):
        for key in ("index-url", "extra-index-url", "find-links"):
            if key in table:
                out[key] = table[key]
    indexes = [i for i in data.get("index") or [] if isinstance(i, dict) and i.get("url")]
    default = [i["url"] for i in indexes if i.get("default")]
    if default:
        out["index-url"] = default[-1]
    extra = [i["url"] for i in indexes if not i.get("default")]
    if extra:
        out["extra-index-url"] = extra + list(out.get("extra-index-url") or [])
    return out


def _as_list(value) -> list[str]:
    return list(value) if isinstance(value, list) else str(value).split() if value else []


def uv_settings() -> IndexSettings:
    """uv's index settings: its files (the user's over the system's), then its ``UV_*`` variables."""
    values: dict[str, object] = {}
    sources = []
    for path in uv_config_files():
        try:
            found = _uv_table(safe_toml.loads(path.read_text()))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
        if found:
            sources.append(str(path))
        values.update(found)
    for var, key in (("UV_INDEX_URL", "index-url"), ("UV_DEFAULT_INDEX", "index-url"),
                     ("UV_EXTRA_INDEX_URL", "extra-index-url"), ("UV_INDEX", "extra-index-url"),
                     ("UV_FIND_LINKS", "find-links")):
        if os.environ.get(var, "").strip():
            values[key] = os.environ[var].split()
            sources.append(var)
    index = _as_list(values.get("index-url"))
    return IndexSettings(index_url=index[0] if index else None,
                         extra_index_urls=_as_list(values.get("extra-index-url")),
                         find_links=_as_list(values.get("find-links")), sources=sources)


@functools.lru_cache(maxsize=None)
def uv_binary() -> Optional[str]:
    """The uv executable: the one the ``uv`` package ships (a dependency of bisector), else uv on PATH."""
    try:
        import uv  # the PyPI package ships the binary

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


_DEFAULT_RE = re.compile(r"--default-index\b.*?\(by\s+default:\s*<([^>\s]+)>\)", re.S)


@functools.lru_cache(maxsize=None)
def installers_default() -> Optional[str]:
    """The index the installers use when nothing is configured: as uv's own help states it, else
    pip's built-in default when pip is importable; None when neither can tell."""
    binary = uv_binary()
    if binary:
        try:
            proc = subprocess.run([binary, "pip", "install", "--help"], capture_output=True, text=True,
                                  timeout=60, env={**os.environ, "NO_COLOR": "1"})
            match = _DEFAULT_RE.search(proc.stdout)
            if match:
                return match.group(1)
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        from pip._internal.models.index import PyPI  # type: ignore
    except Exception:
        return None
    return PyPI.simple_url


# -- the answer -------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def default_index_url() -> str:
    """The primary simple-API index URL the installers on this machine would use."""
    for settings in (uv_settings(), pip_settings()):
        if settings.index_url:
            return settings.index_url
    value = installers_default()
    if not value:
        raise UsageError("no package index configured, and neither uv nor pip is here to name its default: "
                         "give --index-url URL (or set UV_DEFAULT_INDEX / PIP_INDEX_URL)")
    return value


def resolve_index_url(explicit: Optional[str]) -> str:
    """The explicit URL when given, otherwise the installers' configured default."""
    return explicit.strip() if explicit else default_index_url()
