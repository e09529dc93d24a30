"""Bisects of what moved: each confirmed regression whose cell moved one package is bisected between
the two versions, in the regressed cell's environment, and its report attached to the matrix's."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from packaging.version import Version

from bisector.bisection.wiring import bisector_for
from bisector.job.config import JobConfig, JobSection, Mode
from bisector.envs import EnvSpec
from bisector.errors import BisectorError
from bisector.job.argv import run_argv
from bisector.matrix.cells import Cell
from bisector.matrix.grid_config import MatrixConfig
from bisector.matrix.grid_result import BisectAttachment, MatrixResult
from bisector.matrix.grid_run import CellRunner
from bisector.redact import write_redacted
from bisector.safety.safe_write import write_atomic
from bisector.console.progress import PrintHandler
from bisector.report.env_labels import flat_environments
from bisector.report.render import render_markdown
from bisector.store.storage import Store


def _toml_value(value: Any) -> str:
    if isinstance(value, dict):
        items = (f"{json.dumps(k, ensure_ascii=False)} = {_toml_value(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    return json.dumps(value, ensure_ascii=False)


def write_env_spec(spec: EnvSpec, path: Path) -> Path:
    """Write ``spec`` as an env spec TOML (what the bisect loads; also the reproduce command's --env)."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in spec.model_dump(mode="json").items() if v is not None]
    return write_atomic(path, "# written by bisector matrix: the regressed cell's environment\n" + "\n".join(lines) + "\n")


def bisect_job(config: MatrixConfig, pkg: str, good: str, bad: str, env: str = "default",
               pins: Optional[list[str]] = None) -> JobConfig:
    """The bisect of ``pkg`` from ``good`` to ``bad`` with the matrix's index, probe and criterion (its
    command line: bisector.job.argv.run_argv)."""
    return JobConfig(job=JobSection(package=pkg, good=good, bad=bad, mode=Mode.RELEASES, env=env,
                                    index_url=config.matrix.index_url, pre=config.matrix.pre, pins=pins or []),
                     probe=config.probe, criterion=config.criterion, run=config.run)


def _bisect_one(config: MatrixConfig, runner: CellRunner, cache_dir: Path, out: Path, pkg: str, good: str,
                bad: str, spec: EnvSpec) -> BisectAttachment:
    store = runner.store
    stem = f"bisect-{pkg}-{good}-{bad}"
    env = write_env_spec(spec, out.resolve() / f"{stem}.env.toml")
    job = bisect_job(config, pkg, good, bad, env=str(env))
    command = run_argv(job)
    job = job.model_copy(update={"run": config.run.model_copy(update={"store": store.path, "cache_dir": cache_dir})})
    try:
        res = bisector_for(job, store, handler=PrintHandler(), command=command,
                           engine=runner.engine).run()
    except BisectorError as exc:
        return BisectAttachment(package=pkg, good=good, bad=bad, status="error",
                                markdown=f"The bisect could not run: {exc}")
    md = render_markdown(res)
    write_redacted(out / f"{stem}.md", md)
    return BisectAttachment(package=pkg, good=good, bad=bad, status=res.status.value, run_id=res.run_id,
                            first_bad=res.first_bad.ref if res.first_bad else None,
                            last_good=res.last_good.ref if res.last_good else None,
                            report_file=f"{stem}.md", markdown=md,
                            result=flat_environments(res.model_dump(mode="json"), res))   # as the JSON report shows it


def bisect_regressions(config: MatrixConfig, result: MatrixResult, runner: CellRunner, cells: list[Cell],
                       store: Store, cache_dir: Path, out: Path) -> MatrixResult:
    """Bisect each confirmed regression whose cell moved exactly one package forward, and each new
    confirmed step along the candidate's versions (between the two neighbouring versions)."""
    by_key = {c.key: c for c in cells}
    notes, done, attached = list(result.notes), set(), []
    for cell in result.confirmed:
        moved = cell.moved_packages
        if len(moved) != 1:
            notes.append(f"no bisect for {cell.key}: " + (f"several packages moved ({', '.join(moved)})" if moved
                         else "no version moved (the environment or the probe changed)"))
            continue
        pkg, good, bad = moved[0], cell.baseline.versions[moved[0]], cell.versions[moved[0]]
        spec = runner.spec_for(by_key[cell.key], candidate=pkg)
        if Version(good) > Version(bad):
            notes.append(f"no bisect for {cell.key}: {pkg} moved back from {good} to {bad}")
        elif (pkg, good, bad, spec.model_dump_json()) not in done:
            done.add((pkg, good, bad, spec.model_dump_json()))
            out.mkdir(parents=True, exist_ok=True)
            attached.append(_bisect_one(config, runner, cache_dir, out, pkg, good, bad, spec))
    for step in result.new_steps:  # a step along the versions: bisect between the two neighbouring releases
        spec = runner.spec_for(by_key[step.bad_key], candidate=step.package)
        if (step.package, step.good, step.bad, spec.model_dump_json()) not in done:
            done.add((step.package, step.good, step.bad, spec.model_dump_json()))
            out.mkdir(parents=True, exist_ok=True)
            attached.append(_bisect_one(config, runner, cache_dir, out, step.package, step.good, step.bad, spec))
    return result.model_copy(update={"bisects": attached, "notes": notes})
