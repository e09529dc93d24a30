"""Proving an environment holds exactly the candidate without a second interpreter per environment.

The full health check (bisector.envs.check.health) starts the env's Python and imports the candidate:
about 2.5 s of a new environment's 2.85 s, mostly torch's import. Instead a new environment is
checked *statically* at build time (the candidate's dist-info, its stamped revision, where its
modules' files are, the base's torch: all read from disk), and the import is proved by the probe
run itself: a ``.pth`` hook in the env's site-packages records, at the exit of every Python process
that ran with ``$BISECTOR_PROOF`` set, the file and ``__version__`` of the candidate's modules and of
torch as that process imported them. The measurement is accepted only when the proof passes the
same checks the health check makes (``problems``); a probe that never imported the candidate
(an exit-code command, say) gets the full health check instead, once per environment.
"""
from __future__ import annotations

import json
import os
from importlib.metadata import PathDistribution
from pathlib import Path
from typing import Optional

from bisector.envs.model.info import BaseInfo
from bisector.envs.check.health import HealthReport, problems
from bisector.envs.model.env_spec import InstallTarget

PROOF_ENV, MODULES_ENV = "BISECTOR_PROOF", "BISECTOR_PROOF_MODULES"
HOOK_NAME = "_bisector_proof"
HOOK = '''"""bisector's proof hook: with $BISECTOR_PROOF set, record which modules this process imported."""
import os

if os.environ.get("BISECTOR_PROOF"):
    import atexit

    def _bisector_proof():
        import json
        import sys

        names = [n for n in os.environ.get("BISECTOR_PROOF_MODULES", "").split(",") if n] + ["torch"]
        seen = {}
        for name in names:
            module = sys.modules.get(name)
            if module is not None:
                version = getattr(module, "__version__", None)
                seen[name] = {"file": getattr(module, "__file__", None),
                              "version": str(version) if version is not None else None}
        with open(os.environ["BISECTOR_PROOF"], "a") as fh:
            fh.write(json.dumps({"pid": os.getpid(), "modules": seen}) + "\\n")

    atexit.register(_bisector_proof)
'''


def install_hook(site: Path) -> None:
    """Put the proof hook into an env's site-packages (a module and the .pth that imports it)."""
    (site / f"{HOOK_NAME}.py").write_text(HOOK)
    (site / f"{HOOK_NAME}.pth").write_text(f"import {HOOK_NAME}\n")


def _top_names(dist: PathDistribution, package: str) -> list[str]:
    """The candidate's top-level module names, as the health check picks them."""
    tops = (dist.read_text("top_level.txt") or "").split()
    if not tops:
        for f in dist.files or []:
            parts = f.parts
            if parts[0] == ".." or parts[0].endswith((".dist-info", ".data")) or "__pycache__" in parts:
                continue
            if len(parts) > 1 or parts[0].endswith(".py"):
                tops.append(parts[0][:-3] if len(parts) == 1 else parts[0])
    tops = sorted({t for t in tops if t.isidentifier()})
    preferred = package.replace("-", "_").replace(".", "_").lower()
    return [preferred] if preferred in tops else ([t for t in tops if not t.startswith("_")] or tops)


def _module_file(name: str, roots: list[str]) -> Optional[str]:
    for root in roots:
        for candidate in (Path(root) / name / "__init__.py", Path(root) / f"{name}.py"):
            if candidate.is_file():
                return str(candidate)
    return None


def static_report(dist_info: Path, target: InstallTarget, homes: list[str], base: BaseInfo) -> HealthReport:
    """What the env holds, read from disk: the candidate's metadata version and stamped revision, its
    modules' files where they are installed, and the base's torch (no interpreter started)."""
    dist = PathDistribution(dist_info)
    revision = dist.read_text("bisector_revision")
    modules = {n: {"file": _module_file(n, homes), "version": None} for n in _top_names(dist, target.package)}
    torch = None
    if base.torch_version:
        torch = {"version": base.torch_version, "file": _module_file("torch", base.site_dirs) or ""}
    return HealthReport(version=dist.version, revision=revision.strip() if revision else None, modules=modules,
                        torch=torch)


def read_proof(path: Path) -> list[dict]:
    """Every process's record (empty when none wrote one)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def proof_problems(records: list[dict], static: HealthReport, target: InstallTarget, site: Path,
                   base: BaseInfo) -> Optional[list[str]]:
    """None when no process imported the candidate (no proof: run the health check); otherwise the
    health check's problems with what the processes imported (empty: proved)."""
    names = set(static.modules)
    found: list[str] = []
    proved = False
    for record in records:
        seen = record.get("modules") or {}
        if not names & set(seen):
            continue
        proved = True
        modules = {n: seen[n] for n in names if n in seen}
        report = static.model_copy(update={"modules": modules, "torch": seen.get("torch") or static.torch})
        found += [p for p in problems(report, target, site, base) if p not in found]
    return found if proved else None


def proof_env(path: Path, static_modules: list[str]) -> dict[str, str]:
    """The variables that make the hook record into ``path``."""
    return {PROOF_ENV: str(path), MODULES_ENV: ",".join(static_modules)}


def homes_of(env_dir: Path, site: Path, target_in_base: bool, base: BaseInfo) -> list[str]:  # noqa: ARG001
    """Where the candidate's modules must come from: the env's site-packages, or the base's."""
    return list(base.site_dirs) if target_in_base else [os.fspath(site)]
