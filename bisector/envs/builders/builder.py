"""Building one environment from a Recipe, in a staging dir that bisector.envs.builders.once renames into place.

Steps: overlay -> venv -> (commit wheel) -> install as of the candidate's date -> (when a
dated package misses torch's own requirement on it, e.g. typing-extensions, that package
alone is re-resolved without the cutoff) -> overlay .pth -> base conflict check -> health
check -> info file -> atomic rename. Any failure removes the temp dir and raises
EnvironmentFailure.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional

from packaging.specifiers import SpecifierSet

from bisector.envs.builders.backends import Backend, PipBackend
from bisector.envs.model.layout import env_python, site_packages
from bisector.envs.tooling.base_info import installed_dists, torch_git, torch_source
from bisector.envs.builders.commit_wheels import commit_wheel
from bisector.envs.model.environment import Environment, venv_run_env
from bisector.envs.check.health import HealthReport, probe, problems, provided_conflicts
from bisector.envs.tooling.fsops import disk_usage
from bisector.envs.model.info import EnvInfo, InterpreterStamp, utcnow, write_info
from bisector.envs.model.layout import CacheLayout
from bisector.envs.builders.overlay import ensure_overlay, install_pth
from bisector.envs.tooling.tool_runs import log
from bisector.envs.check.proof import install_hook, static_report
from bisector.envs.model.recipe import Recipe
from bisector.errors import EnvironmentFailure


def environment(env_dir: Path, info: EnvInfo, recipe: Recipe) -> Environment:
    """The Environment object of a ready env dir."""
    return Environment(path=env_dir, python=env_python(env_dir), fingerprint=info.fingerprint,
                       info=info, env_vars=dict(recipe.spec.env_vars))


def check_health(env_dir: Path, recipe: Recipe) -> HealthReport:
    """Run the health check in ``env_dir``; EnvironmentFailure on any mismatch."""
    env = venv_run_env(env_dir, recipe.spec.env_vars)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # leave .pyc of what probes import in the env
    report = probe(env_python(env_dir), recipe.target.package, bool(recipe.base.torch_version), env)
    found = problems(report, recipe.target, site_packages(env_dir), recipe.base)
    if found:
        raise EnvironmentFailure("health check: " + "; ".join(found))
    return report


def constraint_misses(site: Path, constraints: dict[str, str]) -> dict[str, str]:
    """Installed packages whose version misses torch's constraint on them."""
    misses = {}
    for name, (dist, _, _) in installed_dists([str(site)]).items():
        spec = constraints.get(name)
        if spec and not SpecifierSet(spec).contains(dist.version, prereleases=True):
            misses[name] = spec
    return misses


def _install(backend: Backend, env_dir: Path, recipe: Recipe, requirement: Optional[str], work: Path) -> list[str]:
    plan = recipe.plan(requirement)
    if not plan.requirements:  # a torch candidate with nothing else in the spec: the base is all
        return []
    backend.install(env_dir, plan, work)
    misses = constraint_misses(site_packages(env_dir), recipe.constraints)
    if not misses:
        return plan.lifted
    log.info("%s: %s as of %s miss torch's requirements; taking newer releases of those",
             recipe.target.ref, ", ".join(sorted(misses)), recipe.target.as_of)
    plan = recipe.plan(requirement, fix=misses)
    backend.install(env_dir, plan, work)
    still = constraint_misses(site_packages(env_dir), misses)
    if still:
        raise EnvironmentFailure("torch needs " + ", ".join(f"{n}{s}" for n, s in sorted(still.items())))
    return plan.lifted


def _requirement(recipe: Recipe, backend: Backend, layout: CacheLayout) -> Optional[str]:
    target = recipe.target
    if recipe.target_in_base:
        return None
    if not target.is_commit:
        return f"{target.package}=={target.version}"
    wheel = commit_wheel(target, backend, recipe.python, recipe.plan(target.package), layout)
    return f"{target.package} @ {wheel.as_uri()}"


def _relocate_scripts(env_dir: Path, old: Path, new: Path) -> None:
    """Rewrite absolute paths in bin/ text files (pip writes absolute shebangs)."""
    for entry in (env_dir / "bin").iterdir():
        if entry.is_symlink() or not entry.is_file() or entry.stat().st_size > 1 << 20:
            continue
        data = entry.read_bytes()
        if bytes(old) in data:
            entry.write_bytes(data.replace(bytes(old), bytes(new)))


def _info(recipe: Recipe, env_dir: Path, report: HealthReport, lifted: list[str], overlay, backend: str,
          timing: tuple[float, float], health: str = "imported") -> EnvInfo:
    site = site_packages(env_dir)
    dists = installed_dists([str(site)])
    homes = recipe.base.site_dirs if recipe.target_in_base else [str(site)]
    target = installed_dists(homes)[recipe.target.canonical_name]
    now = utcnow()
    # env-relative (the env is built elsewhere and renamed); absolute for a candidate in the base
    where = (lambda p: p) if recipe.target_in_base else (lambda p: os.path.relpath(p, env_dir))  # noqa: E731
    paths = [where(m["file"]) for m in report.modules.values() if m.get("file")]
    extra, apparent = disk_usage(env_dir)
    torch, torch_from = torch_source(recipe.base, recipe.spec.base, site)
    return EnvInfo(
        fingerprint=recipe.fingerprint, dir_name=recipe.dir_name, spec_name=recipe.spec.name,
        target=recipe.target, installed_version=report.version, installed_revision=report.revision,
        import_paths=paths, dist_info=where(str(target[2])),
        resolved=[f"{n}=={d.version}" for n, (d, _, _) in sorted(dists.items())],
        lifted=lifted, base=recipe.spec.base, base_fingerprint=recipe.base.fingerprint,
        overlay=str(overlay) if overlay else None, provided=recipe.base.provided, torch=torch, torch_from=torch_from,
        torch_git=torch_git(recipe.base, site),
        python_version=recipe.base.python_version, interpreter=InterpreterStamp.of(env_python(env_dir)),
        backend=backend, created=now, last_used=now, build_seconds=round(time.monotonic() - timing[0], 3),
        health_seconds=round(timing[1], 3), health=health, import_names=sorted(report.modules),
        size_bytes=extra, apparent_bytes=apparent,
    )


def static_health(env_dir: Path, recipe: Recipe) -> HealthReport:
    """The health check read from disk (bisector.envs.check.proof): EnvironmentFailure on any mismatch; the
    import itself is proved later by the probe run."""
    site = site_packages(env_dir)
    homes = list(recipe.base.site_dirs) if recipe.target_in_base else [str(site)]
    dists = installed_dists(homes)
    if recipe.target.canonical_name not in dists:
        raise EnvironmentFailure(f"health check: {recipe.target.package} is not installed in the env")
    report = static_report(dists[recipe.target.canonical_name][2], recipe.target, homes, recipe.base)
    found = problems(report, recipe.target, site, recipe.base)
    if found:
        raise EnvironmentFailure("health check: " + "; ".join(found))
    return report


def build(recipe: Recipe, backend: Backend, layout: CacheLayout, staging: Path, final: Path,
          defer_health: bool = False) -> EnvInfo:
    """Build the env of ``recipe`` into ``staging`` (which must not exist; its parent is scratch space),
    to be renamed to ``final``; returns its info (also written into it). ``defer_health``: check it
    from disk and leave the import to be proved by the probe (bisector.envs.check.proof)."""
    started = time.monotonic()
    work = staging.parent / "work"
    work.mkdir()
    overlay = ensure_overlay(recipe.base, layout)
    backend.create(staging, recipe.python)
    lifted = _install(backend, staging, recipe, _requirement(recipe, backend, layout), work)
    site = site_packages(staging)
    install_pth(site, overlay)
    install_hook(site)
    conflicts = provided_conflicts(site, recipe.base)
    if conflicts:
        raise EnvironmentFailure("the base does not fit: " + "; ".join(conflicts[:3]))
    health_start = time.monotonic()
    report = static_health(staging, recipe) if defer_health else check_health(staging, recipe)
    health = time.monotonic() - health_start
    if isinstance(backend, PipBackend):
        _relocate_scripts(staging, staging, final)
    info = _info(recipe, staging, report, lifted, overlay, backend.name, (started, health),
                 "static" if defer_health else "imported")
    write_info(staging, info)
    return info
