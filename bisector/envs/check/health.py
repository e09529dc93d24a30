"""Health check: the env's python imports exactly the asked-for candidate (and the base's torch).

The check runs in the env with :meth:`Environment.run_env` variables. It reports what is
importable; bisector compares it with the target: the distribution version (releases), the
module's ``__version__`` (releases), the stamped revision (commits), that the module comes
from the env's own site-packages, and that torch is the base's. Any mismatch is an
EnvironmentFailure, never a measurement.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping, Optional

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version
from pydantic import BaseModel

from bisector.envs.tooling.base_info import installed_dists, requirements_of
from bisector.envs.model.info import BaseInfo
from bisector.core.requirements import same_version
from bisector.envs.tooling.tool_runs import run, short_reason
from bisector.envs.model.env_spec import InstallTarget
from bisector.errors import EnvironmentFailure

MARK = "BISECTOR-HEALTH "
SCRIPT = r'''
import importlib, importlib.metadata as md, json, sys
pkg, want_torch = sys.argv[1], sys.argv[2] == "1"
dist = md.distribution(pkg)
tops = (dist.read_text("top_level.txt") or "").split()
if not tops:
    for f in dist.files or []:
        parts = f.parts
        if parts[0] in ("..",) or parts[0].endswith((".dist-info", ".data")) or "__pycache__" in parts:
            continue
        name = parts[0][:-3] if len(parts) == 1 and parts[0].endswith(".py") else parts[0]
        if len(parts) > 1 or parts[0].endswith(".py"):
            tops.append(name)
tops = sorted(set(t for t in tops if t.isidentifier()))
preferred = pkg.replace("-", "_").replace(".", "_").lower()
names = [preferred] if preferred in tops else ([t for t in tops if not t.startswith("_")] or tops)
mods = {}
for name in names:
    m = importlib.import_module(name)
    v = getattr(m, "__version__", None)
    mods[name] = {"file": getattr(m, "__file__", None), "version": v if isinstance(v, str) else None}
rev = dist.read_text("bisector_revision")
out = {"version": dist.version, "revision": rev.strip() if rev else None, "modules": mods, "torch": None}
if want_torch:
    import torch
    out["torch"] = {"version": torch.__version__, "file": torch.__file__}
print("BISECTOR-HEALTH " + json.dumps(out))
'''


class HealthReport(BaseModel):
    """What the env's python says it imports."""

    version: str
    revision: Optional[str] = None
    modules: dict[str, dict[str, Optional[str]]]
    torch: Optional[dict[str, str]] = None


def probe(python: Path, package: str, want_torch: bool, env: Mapping[str, str], timeout: float = 600) -> HealthReport:
    """Run the health script in the env; EnvironmentFailure when it cannot import the package."""
    try:
        proc = run([python, "-c", SCRIPT, package, "1" if want_torch else "0"],
                   "health check", env=env, timeout=timeout)
    except EnvironmentFailure as exc:
        raise EnvironmentFailure(str(exc).replace("health check: ", "health check failed: ", 1)) from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if not lines:
        raise EnvironmentFailure(f"health check printed no report: {short_reason(proc.stdout + proc.stderr)}")
    return HealthReport.model_validate(json.loads(lines[-1][len(MARK):]))


def _under(path: Optional[str], roots: list[str]) -> bool:
    real = os.path.realpath(path) if path else ""
    return any(real.startswith(os.path.realpath(r) + os.sep) for r in roots)


def problems(report: HealthReport, target: InstallTarget, site: Path, base: BaseInfo) -> list[str]:
    """Differences between what the env imports and what was asked for (empty when healthy).

    The candidate's modules must come from the env's site-packages, or from the base's when
    the candidate is the base's torch."""
    found, pkg = [], target.package
    if target.version and not same_version(report.version, target.version):
        found.append(f"asked for {pkg} {target.version}, metadata says {report.version}")
    if target.revision and report.revision != target.stamp:
        found.append(f"asked for {pkg} at {target.ref}, installed revision is {report.revision}")
    home = base.site_dirs if target.canonical_name in base.provided else [str(site)]
    for name, mod in report.modules.items():
        if not _under(mod.get("file"), home):
            where = "the base" if home is base.site_dirs else "the env"
            found.append(f"{name} imports from {mod.get('file')}, outside {where}")
        version = mod.get("version")
        if target.version and version and not same_version(version, target.version):
            found.append(f"asked for {pkg} {target.version}, {name}.__version__ is {version}")
    if base.torch_version:
        torch = report.torch or {}
        # as versions: the base's metadata says 2.11.0, the module 2.11.0+cu130 (a label, not another torch)
        if not same_version(torch.get("version") or "", base.torch_version) \
                or not _under(torch.get("file"), base.site_dirs):
            found.append(f"torch is {torch.get('version')} from {torch.get('file')}, "
                         f"not the base's {base.torch_version}")
    return found


def provided_conflicts(site: Path, base: BaseInfo) -> list[str]:
    """Installed requirements on provided (base) packages that the base's versions miss."""
    found = []
    for name, (dist, _, _) in sorted(installed_dists([str(site)]).items()):
        for req in requirements_of(dist, base.markers):
            have = base.provided.get(canonicalize_name(req.name))
            if have and not SpecifierSet(str(req.specifier)).contains(Version(have), prereleases=True):
                found.append(f"{name} {dist.version} needs {req}, the base has {have}")
    return found
