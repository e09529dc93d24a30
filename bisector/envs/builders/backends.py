"""Installer backends: uv (default) and virtualenv + pip (fallback).

Both get the same :class:`InstallPlan`: requirements, torch's constraints, the provided
(base) packages that must never be installed, the as-of cutoff and the packages lifted
from it. uv reads its own configuration for the index unless the plan names one; so does
pip (pip.conf, PIP_INDEX_URL, ...). No index host is ever written here.
"""
from __future__ import annotations

import functools
import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Optional


from bisector.envs.tooling.tool_runs import clean_env, run
from bisector.envs.model.layout import env_python, site_packages
from bisector.envs.model.recipe import InstallPlan, iso
from bisector.errors import EnvironmentFailure
from bisector.sources.installer_config import uv_binary

FAR_FUTURE = "2999-01-01T00:00:00Z"



class Backend:
    """Creates a venv, installs a plan into it, builds wheels from source trees."""

    name = "?"

    def unusable(self) -> Optional[str]:
        """None when usable, else why not."""
        raise NotImplementedError

    def create(self, env_dir: Path, python: Path) -> None:
        raise NotImplementedError

    def install(self, env_dir: Path, plan: InstallPlan, workdir: Path) -> None:
        raise NotImplementedError

    def build_wheel(self, src: Path, out_dir: Path, python: Path, plan: InstallPlan, isolated: bool = True,
                    env_vars: Optional[dict[str, str]] = None) -> None:
        raise NotImplementedError


@functools.lru_cache(maxsize=None)
def _uv_problem(binary: Optional[str]) -> Optional[str]:
    if binary is None:
        return "uv not found"
    try:
        proc = run([binary, "pip", "install", "--help"], "uv pip install --help", env=clean_env(), timeout=60)
    except EnvironmentFailure as exc:
        return str(exc)
    missing = [f for f in ("--excludes", "--exclude-newer-package", "--link-mode") if f not in proc.stdout]
    return f"uv at {binary} lacks {', '.join(missing)} (too old)" if missing else None


def pip_index_args(index_url: Optional[str], extra_index_urls: list[str]) -> list[str]:
    """pip's index flags; with none, pip's own configuration decides."""
    args = ["--index-url", index_url] if index_url else []
    for url in extra_index_urls:
        args += ["--extra-index-url", url]
    return args


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


class UvBackend(Backend):
    """uv venv + uv pip install, hardlinked from uv's cache; torch excluded from resolution."""

    name = "uv"

    def __init__(self, binary: Optional[str] = None):
        self.binary = binary or uv_binary()

    def unusable(self) -> Optional[str]:
        return _uv_problem(self.binary)

    def _index_args(self, plan: InstallPlan) -> list[str]:
        args = ["--default-index", plan.index_url] if plan.index_url else []
        for url in plan.extra_index_urls:
            args += ["--index", url]
        return args

    def create(self, env_dir: Path, python: Path) -> None:
        run([self.binary, "venv", "--quiet", "--relocatable", "--no-project", "--python", python, env_dir],
            "creating the venv", cwd=env_dir.parent, env=clean_env())

    def install(self, env_dir: Path, plan: InstallPlan, workdir: Path) -> None:
        args = [self.binary, "pip", "install", "--python", env_python(env_dir), "--link-mode", "hardlink",
                "-r", _write_lines(workdir / "requirements.txt", plan.requirements)]
        if plan.constraints:
            cons = [f"{n}{s}" for n, s in sorted(plan.constraints.items())]
            args += ["-c", _write_lines(workdir / "constraints.txt", cons)]
        if plan.provided:
            args += ["--excludes", _write_lines(workdir / "excludes.txt", sorted(plan.provided))]
        if plan.cutoff is not None:
            args += ["--exclude-newer", iso(plan.cutoff)]
            for name in sorted(plan.lifted):
                args += ["--exclude-newer-package", f"{name}={FAR_FUTURE}"]
        run(args + self._index_args(plan), "resolving/installing", cwd=workdir, env=clean_env())

    def build_wheel(self, src: Path, out_dir: Path, python: Path, plan: InstallPlan, isolated: bool = True,
                    env_vars: Optional[dict[str, str]] = None) -> None:
        flags = [] if isolated else ["--no-build-isolation"]
        run([self.binary, "build", "--wheel", "--no-build-logs", *flags, "--python", python, "--out-dir", out_dir,
             *self._index_args(plan), src], "building the commit's wheel", cwd=src, env=clean_env(env_vars))


class PipBackend(Backend):
    """virtualenv + pip. Provided packages are shown to pip as installed stubs while it runs."""

    name = "virtualenv"

    def unusable(self) -> Optional[str]:
        return None if importlib.util.find_spec("virtualenv") else "virtualenv is not installed"

    def _index_args(self, plan: InstallPlan) -> list[str]:
        return pip_index_args(plan.index_url, plan.extra_index_urls)

    def create(self, env_dir: Path, python: Path) -> None:
        run([sys.executable, "-m", "virtualenv", "--quiet", "--no-setuptools", "--no-periodic-update",
             "--python", python, env_dir], "creating the venv", cwd=env_dir.parent, env=clean_env())

    def _pip(self, env_dir: Path) -> list[str]:
        return [str(env_python(env_dir)), "-m", "pip", "--disable-pip-version-check", "--no-input"]

    def install(self, env_dir: Path, plan: InstallPlan, workdir: Path) -> None:
        stubs = write_stubs(site_packages(env_dir), plan.provided)
        try:
            cons = [f"{n}{s}" for n, s in sorted(plan.constraints.items())]
            cons += [f"{n}=={v}" for n, v in sorted(plan.provided.items())]
            common = ["-c", str(_write_lines(workdir / "constraints.txt", cons)), *self._index_args(plan)]
            lifted = plan.lifted_requirements() if plan.cutoff else []
            if lifted:
                run(self._pip(env_dir) + ["install", "--no-deps", *common, *lifted],
                    "installing pinned packages", cwd=workdir, env=clean_env())
            args = self._pip(env_dir) + ["install", *common,
                                         "-r", str(_write_lines(workdir / "requirements.txt", plan.requirements))]
            if plan.cutoff is not None:
                args += ["--uploaded-prior-to", iso(plan.cutoff)]
            run(args, "resolving/installing", cwd=workdir, env=clean_env())
        finally:
            for stub in stubs:
                shutil.rmtree(stub, ignore_errors=True)

    def build_wheel(self, src: Path, out_dir: Path, python: Path, plan: InstallPlan, isolated: bool = True,
                    env_vars: Optional[dict[str, str]] = None) -> None:
        flags = [] if isolated else ["--no-build-isolation"]
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", *flags, "-w", out_dir,
             *self._index_args(plan), src], "building the commit's wheel", cwd=src, env=clean_env(env_vars))


def write_stubs(site: Path, provided: dict[str, str]) -> list[Path]:
    """Metadata-only .dist-info dirs that make pip treat the base's packages as installed."""
    stubs = []
    for name, version in sorted(provided.items()):
        stub = site / f"{name.replace('-', '_')}-{version}.dist-info"
        stub.mkdir()
        (stub / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (stub / "INSTALLER").write_text("bisector-stub\n")
        (stub / "RECORD").write_text("")
        stubs.append(stub)
    return stubs


def make_backend(name: str) -> Backend:
    """The backend called ``name`` ("uv" or "virtualenv")."""
    if name == "uv":
        return UvBackend()
    if name == "virtualenv":
        return PipBackend()
    raise ValueError(f"unknown backend {name!r}")
