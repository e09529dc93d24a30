"""``bisector matrix``: flags, the run (measure, compare, confirm), bisects of what moved, reports.

Exit codes: 0 no regression, 1 confirmed regression, 2 usage or config error (raised as
:class:`~bisector.errors.UsageError`), 3 nothing could be measured.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

from packaging.version import Version

from .cli_args import add_env_and_probe_flags, add_execution_flags, probe_overrides
from .config import JobConfig, JobSection, Mode
from .criterion import Criterion, Direction
from .driver import ENVS_DIR
from .envs import EnvManager, EnvSpec, load_env_spec
from .errors import BisectorError, UndecidedError, UsageError
from .gpus import detect_gpus
from .matrix import (BisectAttachment, CellResult, CellRunner, MatrixResult, compare, grid_history,
                     load_baseline, match_baseline, new_run_id, plan_cells, save_run, still_bad, summarise,
                     timestamp)
from .matrix_config import Cell, MatrixConfig, grid_id, load_matrix_config
from .paths import default_cache_dir, default_store_path
from .store import Measurement, Store
from .units import human_value


def add_matrix_parser(sub) -> None:
    """Add the ``matrix`` subcommand and its flags to argparse subparsers ``sub``."""
    p = sub.add_parser("matrix", help="probe a grid of versions, compare with the last run, bisect what moved",
                       description="Run the probe over the [matrix] grid of versions, store the run, compare it "
                       "with the previous run of the same grid (or --baseline) and write reports to --out. "
                       "Exit 0: no regression, 1: confirmed regression, 2: usage error, 3: nothing measured.")
    g = p.add_argument_group("matrix")
    g.add_argument("--config", type=Path, help="job file with a [matrix] table (default: ./bisect.toml)")
    g.add_argument("--out", type=Path, default=Path("bisector-matrix"),
                   help="report directory: matrix.md, matrix.json, plot-<metric>.png (default: ./bisector-matrix)")
    g.add_argument("--baseline", metavar="RUN_ID", help="compare with this matrix run "
                   "(default: the previous run of the same grid and probe)")
    g.add_argument("--bisect-on-regression", action="store_true",
                   help="bisect each confirmed regression between the versions that bound it")
    add_env_and_probe_flags(p, g)
    _verdict_and_run_flags(p)


def _verdict_and_run_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("verdicts")
    g.add_argument("--metric", help="metric the criterion reads")
    g.add_argument("--threshold", type=float, help="regression when the metric goes beyond this value")
    g.add_argument("--max-increase", help="regression when the metric moved more than this from the baseline "
                   "cell ('20%%' or a delta)")
    g.add_argument("--direction", choices=["increase", "decrease"], help="which way a regression moves the metric")
    g.add_argument("--repeats", type=int, help="measurements per cell (median)")
    g.add_argument("--noise", type=float, help="noise band around the threshold (metric units)")
    add_execution_flags(p, "cells measured at once (one probe per GPU when GPUs are present)",
                        "build the next cells' environments while probes run")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {"matrix": {"env": args.env, "index_url": args.index_url}, "probe": probe_overrides(args),
            "criterion": {"metric": args.metric, "threshold": args.threshold, "max_increase": args.max_increase,
                          "direction": args.direction, "repeats": args.repeats, "noise": args.noise},
            "run": {"jobs": args.jobs, "prefetch": args.prefetch, "store": args.store,
                    "cache_dir": args.cache_dir, "env_backend": args.env_backend}}


def _describe(c: Criterion) -> str:
    if c.threshold is not None:
        return f"{c.metric} {'>' if c.direction is Direction.INCREASE else '<'} {c.threshold:.6g}"
    if c.max_increase is not None:
        way = "up" if c.direction is Direction.INCREASE else "down"
        return f"{c.metric} moves {way} more than {c.max_increase} from the baseline cell"
    return f"{c.metric} reported (no threshold)" if c.metric else "probe failures only (no metric criterion)"


def _metrics(config: MatrixConfig, cells: list[CellResult]) -> list[str]:
    """Columns and plots: ``[matrix] metrics``, else the criterion's metric, else every metric seen."""
    if config.matrix.metrics:
        return list(config.matrix.metrics)
    if config.criterion.metric:
        return [config.criterion.metric]
    return sorted({k for c in cells for k in c.metrics})


class _Progress:
    """One stderr line per measured cell (stdout stays clean for --json)."""

    def __init__(self, runner: CellRunner, metric: Optional[str]):
        self.runner, self.metric = runner, metric

    def __call__(self, cell: Cell, ms: list[Measurement]) -> None:
        m = ms[-1]
        where = ", ".join(f"{p}=={s.version}" for p, s in zip(self.runner.packages, cell.slots))
        value = m.metrics.get(self.metric) if self.metric else None
        shown = f" {self.metric}={human_value(value, self.metric)}" if value is not None else ""
        stored = " (stored)" if all(x.key in self.runner.reused for x in ms) else ""
        print(f"  cell {where}: {m.status}{shown}{stored}", file=sys.stderr, flush=True)


def _measure(config: MatrixConfig, runner: CellRunner, cells: list[Cell]) -> list[CellResult]:
    """Measure each distinct version combination once; cells sharing versions share the result."""
    unique: dict[tuple, Cell] = {}
    for cell in cells:
        unique.setdefault(tuple(s.version for s in cell.slots), cell)
    crit = config.criterion
    ms = runner.measure(list(unique.values()), range(crit.repeats), on_done=_Progress(runner, crit.metric))
    by_versions = dict(zip(unique, ms))
    out = [summarise(c, runner.packages, by_versions[tuple(s.version for s in c.slots)], crit) for c in cells]
    return [r.model_copy(update={"reused": all(k in runner.reused for k in r.measurements)}) for r in out]


def _confirm(config: MatrixConfig, runner: CellRunner, cells: list[Cell],
             results: list[CellResult]) -> list[CellResult]:
    """Re-measure each regressed cell once more (a new repeat index); confirmed when it still crosses."""
    todo = [i for i, r in enumerate(results) if r.verdict == "regression"]
    if not todo:
        return results
    crit, exit_mode = config.criterion, config.probe.exit_code_mode
    again = runner.measure([cells[i] for i in todo], range(crit.max_repeats, crit.max_repeats + 1))
    out = list(results)
    for i, ms in zip(todo, again):
        bad, value = still_bad(results[i], ms, crit, exit_mode)
        out[i] = results[i].model_copy(update={"confirmed": bad, "confirm_value": value,
                                               "measurements": results[i].measurements + [m.key for m in ms]})
    return out


def _start(config: MatrixConfig, store: Store, cells_excluded: int, baseline: Optional[MatrixResult]) -> MatrixResult:
    m, gid = config.matrix, grid_id(config)
    probe = config.probe.label()
    return MatrixResult(run_id=new_run_id(), created=timestamp(), grid_id=gid, packages=m.packages, grid=m.grid,
                        pins=m.pins, excluded=cells_excluded, probe=Path(probe).name if config.probe.path else probe,
                        criterion=_describe(config.criterion), criterion_metric=config.criterion.metric,
                        baseline_run=baseline.run_id if baseline else None,
                        baseline_created=baseline.created if baseline else None,
                        history=len(grid_history(store, gid)))


def run_matrix(config: MatrixConfig, store: Store, cache_dir: Path, baseline_id: Optional[str],
               command: list[str]) -> tuple[MatrixResult, CellRunner, list[Cell]]:
    """Plan, measure, compare and confirm one matrix run; the run is stored as it starts and ends."""
    spec = load_env_spec(config.matrix.env, ENVS_DIR)
    baseline = load_baseline(store, grid_id(config), baseline_id)
    try:
        cells, dropped = plan_cells(config)
    except UsageError:
        raise
    except BisectorError as exc:
        raise UndecidedError(f"nothing could be measured: {exc}") from None
    result = _start(config, store, dropped, baseline)
    envs = EnvManager(cache_dir / "envs", backend=config.run.env_backend)
    prefetch = config.run.prefetch if config.run.prefetch is not None else True
    runner = CellRunner(store.path, envs, spec, config.probe, config.matrix.packages, config.matrix.pins,
                        config.matrix.index_url, result.run_id, config.run.jobs, prefetch, detect_gpus())
    save_run(store, config, result, "running", command)
    try:
        measured = _measure(config, runner, cells)
        bases = match_baseline(measured, baseline)
        compared = [compare(c, bases.get(c.key), config.criterion, config.probe.exit_code_mode) for c in measured]
        compared = _confirm(config, runner, cells, compared)
    except BaseException as exc:
        save_run(store, config, result, "failed" if isinstance(exc, Exception) else "interrupted", command)
        raise
    finally:
        runner.close()
    result = result.model_copy(update={"cells": compared, "metrics": _metrics(config, compared),
                                       "probes_run": runner.probes_run, "measurements_reused": len(runner.reused)})
    return result, runner, cells


# -- bisects of what moved --------------------------------------------------------------------

def _toml_value(value: Any) -> str:
    if isinstance(value, dict):
        items = (f"{json.dumps(k, ensure_ascii=False)} = {_toml_value(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    return json.dumps(value, ensure_ascii=False)


def write_env_spec(spec: EnvSpec, path: Path) -> Path:
    """Write ``spec`` as an env spec TOML (what the bisect loads; also the reproduce command's --env)."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in spec.model_dump(mode="json").items() if v is not None]
    path.write_text("# written by bisector matrix: the regressed cell's environment\n" + "\n".join(lines) + "\n")
    return path


def _bisect_command(config: MatrixConfig, pkg: str, good: str, bad: str, env: Path) -> list[str]:
    p, c = config.probe, config.criterion
    argv = ["bisector", "run", "--package", pkg, "--good", good, "--bad", bad, "--mode", "releases",
            "--env", str(env)]
    argv += ["--index-url", config.matrix.index_url] if config.matrix.index_url else []
    argv += ["--probe-cmd", p.cmd] if p.cmd else ["--probe", str(p.path or p.name)]
    argv += [x for a in p.args for x in ("--probe-arg", a)]
    for flag, value in (("--metric", c.metric), ("--threshold", c.threshold), ("--max-increase", c.max_increase)):
        argv += [flag, str(value)] if value is not None else []
    return argv + ["--direction", c.direction.value]


def _bisect_one(config: MatrixConfig, store: Store, cache_dir: Path, out: Path, pkg: str, good: str, bad: str,
                spec: EnvSpec) -> BisectAttachment:
    from .driver import Bisector
    from .progress import PrintHandler
    from .report import render_markdown
    stem = f"bisect-{pkg}-{good}-{bad}"
    env = write_env_spec(spec, out.resolve() / f"{stem}.env.toml")
    job = JobConfig(job=JobSection(package=pkg, good=good, bad=bad, mode=Mode.RELEASES, env=str(env),
                                   index_url=config.matrix.index_url, pre=config.matrix.pre),
                    probe=config.probe, criterion=config.criterion,
                    run=config.run.model_copy(update={"store": store.path, "cache_dir": cache_dir}))
    try:
        res = Bisector(job, store, cache_dir, handler=PrintHandler(),
                       command=_bisect_command(config, pkg, good, bad, env)).run()
    except BisectorError as exc:
        return BisectAttachment(package=pkg, good=good, bad=bad, status="error",
                                markdown=f"The bisect could not run: {exc}")
    md = render_markdown(res)
    (out / f"{stem}.md").write_text(md)
    return BisectAttachment(package=pkg, good=good, bad=bad, status=res.status, run_id=res.run_id,
                            first_bad=res.first_bad.ref if res.first_bad else None,
                            last_good=res.last_good.ref if res.last_good else None,
                            report_file=f"{stem}.md", markdown=md, result=res.model_dump(mode="json"))


def bisect_regressions(config: MatrixConfig, result: MatrixResult, runner: CellRunner, cells: list[Cell],
                       store: Store, cache_dir: Path, out: Path) -> MatrixResult:
    """Bisect each confirmed regression whose cell moved exactly one package forward."""
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
            attached.append(_bisect_one(config, store, cache_dir, out, pkg, good, bad, spec))
    return result.model_copy(update={"bisects": attached, "notes": notes})


def _config_path(args) -> Optional[Path]:
    if args.config is not None:
        return args.config
    return Path("bisect.toml") if Path("bisect.toml").is_file() else None


def matrix_command(args) -> int:
    """Run ``bisector matrix``; the exit code says whether a confirmed regression was found."""
    from .matrix_report import render_text, write_reports
    config = load_matrix_config(_config_path(args), _overrides(args))
    config.probe.script()  # an unknown probe is a usage error before any work
    store = Store(config.run.store or default_store_path())
    cache_dir = config.run.cache_dir or default_cache_dir()
    command = ["bisector", *sys.argv[1:]]
    try:
        result, runner, cells = run_matrix(config, store, cache_dir, args.baseline, command)
        if args.bisect_on_regression and result.confirmed:
            result = bisect_regressions(config, result, runner, cells, store, cache_dir, args.out)
        paths = write_reports(result, args.out)
        save_run(store, config, result, "done", command)
    finally:
        store.close()
    print(paths["json"].read_text().rstrip() if args.json else render_text(result, paths))
    return result.exit_code
