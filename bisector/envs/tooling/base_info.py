"""The shared heavy base: which interpreter, and which of its packages candidates may see.

A base is an interpreter with torch installed. What candidates may see of it is torch's
dependency closure (by importlib.metadata requirements, markers evaluated for that
interpreter, extras off). Of that closure, the heavy packages (torch, triton, nvidia-*,
cuda-*) are *provided*: never resolved or installed per candidate. The others (filelock,
sympy, ...) stay visible through the overlay, but a candidate may resolve its own version,
which then wins; torch's own version requirements on them become install *constraints*.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from importlib.metadata import PathDistribution
from pathlib import Path
from typing import Optional

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from pydantic import ValidationError

from bisector.envs.tooling import _pyinfo
from bisector.envs.model.info import BaseDist, BaseInfo, InterpreterStamp
from bisector.envs.model.layout import CacheLayout
from bisector.envs.tooling.tool_runs import clean_env, run
from bisector.envs.model.env_spec import CURRENT, NO_BASE, TORCH, EnvSpec
from bisector.errors import UsageError
from bisector.safety.safe_write import write_atomic
from bisector.sources.dist_metadata import applies, requirements

ROOT = TORCH
HEAVY = re.compile(r"^(torch|triton|pytorch-triton(-.+)?|nvidia-.+|cuda-.+|intel-.+)$")


def installed_dists(site_dirs: list[str]) -> dict[str, tuple[PathDistribution, str, Path]]:
    """canonical name -> (distribution, site dir, metadata dir); the first site dir wins."""
    found: dict[str, tuple[PathDistribution, str, Path]] = {}
    for site in site_dirs:
        for entry in sorted(os.listdir(site)):
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            path = Path(site) / entry
            dist = PathDistribution(path)
            name = dist.metadata["Name"] if dist.metadata else None
            if name:
                found.setdefault(canonicalize_name(name), (dist, site, path))
    return found


def requirements_of(dist: PathDistribution, markers: dict[str, str]) -> list[Requirement]:
    """The distribution's requirements that apply under ``markers`` (extras off)."""
    return [req for req in requirements(dist.requires or []) if applies(req, markers=markers)]


def closure(site_dirs: list[str], markers: dict[str, str]) -> tuple[list[BaseDist], dict[str, str]]:
    """torch's installed dependency closure and the version constraints inside it."""
    dists = installed_dists(site_dirs)
    if ROOT not in dists:
        return [], {}
    seen, todo, specs = {ROOT}, [ROOT], {}
    while todo:
        dist = dists[todo.pop()][0]
        for req in requirements_of(dist, markers):
            name = canonicalize_name(req.name)
            if name not in dists:
                continue
            if str(req.specifier):
                specs.setdefault(name, []).append(str(req.specifier))
            if name not in seen:
                seen.add(name)
                todo.append(name)
    members = [
        BaseDist(name=n, version=dists[n][0].version, dist_info=str(dists[n][2]), site_dir=dists[n][1])
        for n in sorted(seen)
    ]
    constraints = {n: str(SpecifierSet(",".join(s))) for n, s in sorted(specs.items())}
    return members, constraints


def describe_interpreter(python: Path) -> dict:
    """executable, version, site dirs and markers of ``python`` (in-process for ourselves)."""
    if os.path.realpath(python) == os.path.realpath(sys.executable) and Path(python) == Path(sys.executable):
        return _pyinfo.describe()
    proc = run([python, "-E", _pyinfo.__file__], f"inspecting base interpreter {python}", env=clean_env())
    return json.loads(proc.stdout)


def _stamp(python: Path, site_dirs: list[str]) -> dict[str, object]:
    stamp = InterpreterStamp.of(python)
    mtimes = {d: os.stat(d).st_mtime_ns for d in site_dirs if os.path.isdir(d)}
    return {"python": stamp.model_dump() if stamp else None, "sites": mtimes}


def _fingerprint(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


_VERSION_LINE = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", re.M)
_GIT_LINE = re.compile(r"""^git_version\s*(?::\s*str\s*)?=\s*['"]([0-9a-fA-F]{7,40})['"]""", re.M)


def module_version(site_dirs: list[str], name: str = ROOT) -> Optional[str]:
    """A package's ``__version__`` as its files state it (``torch/version.py``, else its ``__init__``),
    read from disk: the build's own version, local label included, without importing it."""
    for site in site_dirs:
        for rel in (f"{name}/version.py", f"{name}/__init__.py"):
            try:
                found = _VERSION_LINE.findall(Path(site, rel).read_text(errors="replace"))
            except OSError:
                continue
            if found:
                return found[-1]
    return None


def module_git_version(site_dirs: list[str], name: str = ROOT) -> Optional[str]:
    """The commit a torch build says it was built from (``git_version`` in ``torch/version.py``), read
    from disk: what tells two nightlies apart as commits."""
    for site in site_dirs:
        try:
            found = _GIT_LINE.findall(Path(site, name, "version.py").read_text(errors="replace"))
        except OSError:
            continue
        if found:
            return found[-1].lower()
    return None


def describe_base(spec_base: str, python: Path) -> BaseInfo:
    """Inspect the base interpreter and compute its closure (the slow path, cached by callers). The
    base "none" shows candidates nothing: each environment resolves its own torch."""
    desc = describe_interpreter(python)
    members, constraints = closure(desc["site_dirs"], desc["markers"]) if spec_base != NO_BASE else ([], {})
    provided = {d.name: d.version for d in members if HEAVY.match(d.name)}
    constraints = {n: s for n, s in constraints.items() if n not in provided}
    fp = _fingerprint({
        "python": os.path.realpath(python), "version": desc["version"], "sites": desc["site_dirs"],
        "closure": [d.model_dump() for d in members], "constraints": constraints,
    })
    return BaseInfo(
        spec=spec_base, python=str(python), python_version=desc["version"],
        site_dirs=desc["site_dirs"], markers=desc["markers"], closure=members, provided=provided,
        constraints=constraints, stamp=_stamp(python, desc["site_dirs"]), fingerprint=fp,
        torch_build=module_version([d.site_dir for d in members if d.name == ROOT]) if ROOT in provided else None,
        torch_git=module_git_version([d.site_dir for d in members if d.name == ROOT]) if ROOT in provided else None,
    )


def torch_git(base: BaseInfo, site: Path) -> Optional[str]:
    """The commit the environment's torch was built from: the base's, else its own site-packages'."""
    return base.torch_git if base.torch_version else module_git_version([str(site)])


def torch_source(base: BaseInfo, spec_base: str, site: Path) -> tuple[Optional[str], Optional[str]]:
    """(torch's build version, where it comes from) for an environment over ``base`` whose own
    site-packages is ``site``: the facts a report's environment line tells."""
    if base.torch_version:
        build = base.torch_build or base.torch_version
        if spec_base == CURRENT:
            return build, f"bisector's interpreter ({base.python})"
        if spec_base.startswith("torch=="):
            return build, f"a base venv with {spec_base}, installed by pip ({Path(base.python).parent.parent})"
        return build, f"the base {spec_base} ({base.python})"
    build = module_version([str(site)])
    return build, ("the candidate's own environment (resolved as of its date)" if build else None)


def cached_base(spec_base: str, python: Path, layout: CacheLayout) -> BaseInfo:
    """describe_base, cached in ``<cache>/bases/<key>.json`` while stat stamps still match."""
    key = _fingerprint({"base": spec_base, "python": str(python)})
    path = layout.bases / f"{key}.json"
    try:
        info = BaseInfo.model_validate_json(path.read_bytes())
        if info.stamp == _stamp(python, info.site_dirs):
            return info
    except (OSError, ValidationError, ValueError):
        pass
    info = describe_base(spec_base, python)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, info.model_dump_json(indent=1))
    return info


def described_prefixes(layout: CacheLayout) -> dict[str, Path]:
    """Fingerprint -> prefix of every described base (``<cache>/bases/*.json``)."""
    found = {}
    for path in layout.bases.glob("*.json") if layout.bases.is_dir() else []:
        try:
            info = BaseInfo.model_validate_json(path.read_bytes())
        except (OSError, ValidationError, ValueError):
            continue
        found[info.fingerprint] = Path(info.python).parent.parent
    return found


def venv_python(prefix: Path) -> Path:
    """The interpreter of an env or prefix dir; UsageError when there is none."""
    for name in ("bin/python", "bin/python3", "python.exe", "Scripts/python.exe"):
        if (prefix / name).exists():
            return prefix / name
    raise UsageError(f"base {prefix}: no bin/python in that directory")


def check_python(spec: EnvSpec, info: BaseInfo) -> None:
    """UsageError unless spec.python (when given) names the base's interpreter."""
    want = spec.python
    if want is None:
        return
    if os.sep in want or os.path.exists(want):
        same = os.path.realpath(os.path.expanduser(want)) == os.path.realpath(info.python)
    else:
        same = info.python_version == want or info.python_version.startswith(want + ".")
    if not same:
        raise UsageError(
            f"env spec {spec.name}: python {want!r} does not match the base's python "
            f"{info.python_version} ({info.python})"
        )
