"""``bisector matrix``: load the [matrix] job, run it, bisect what moved, draft the issues, write and
print the reports.

Exit codes: 0 nothing found, 1 confirmed regression, 2 usage or config error (raised as
:class:`~bisector.errors.UsageError`), 3 nothing could be measured, 4 cells lost (not measured tonight,
though the baseline measured them, or no run of the grid has yet).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from bisector.cli.overrides import matrix_overrides
from bisector.data import specs_dir
from bisector.envs import load_env_spec
from bisector.matrix.bisects import bisect_regressions
from bisector.matrix.cells import Plan
from bisector.matrix.draft_text import write_drafts
from bisector.matrix.grid_config import MatrixConfig, load_matrix_config
from bisector.matrix.grid_result import MatrixResult
from bisector.matrix.history import grid_history, save_run
from bisector.matrix.html import PAGE, write_html
from bisector.matrix.grid_report import JSON_FILE, MARKDOWN_FILE, render_text, write_reports
from bisector.matrix.grid_run import matrix_plan, run_matrix
from bisector.matrix.issue_drafts import track, with_releases_between
from bisector.measure.assembly import check_executor, probe_device
from bisector.measure.gpus import Gpu, detect_gpus
from bisector.paths import default_cache_dir, default_store_path
from bisector.sources.index import list_releases, pages_read_once
from bisector.sources.installer_config import resolve_index_url
from bisector.store.run_record import config_hash, shown_status, stopped_run
from bisector.store.storage import RunKind, RunState, Store
from bisector.store.integrity import check_directory, check_run_paths
from bisector.safety.safe_text import json_visible
from bisector.safety.destinations import Protected
from bisector.safety.safe_write import check_destinations

REPORT_FILES = ("plot-*.png", "*.md")   # the plots and the bisect reports (their names known after the run)
DRAFT_FILES = ("*.md",)                # the issue drafts


def _config_path(args) -> Optional[Path]:
    if args.config is not None:
        return args.config
    return Path("bisect.toml") if Path("bisect.toml").is_file() else None


def _previous_drafts(store: Store, result: MatrixResult):
    """The issue drafts of the grid's latest finished run (whatever run this one is compared with)."""
    runs = grid_history(store, result.grid_id)
    return MatrixResult.model_validate(runs[-1].result).issue_drafts if runs else []


def _preflight(config: MatrixConfig, args, issues: Path) -> tuple[Plan, list[Gpu]]:
    """Everything that can be refused before a cell is measured (or the store created): the executor,
    the probe and its arguments (for this machine's GPUs, found once: the run measures on them), the store,
    the cache, report and drafts directories, the env spec, and every version of the grid on the index (the
    plan the run then measures)."""
    check_executor(config.run.executor, config.run.ray_address)  # --executor ray without Ray
    gpus = detect_gpus()
    config.probe.check(probe_device(config.run.executor, gpus))
    check_run_paths(config.run.store, config.run.cache_dir)
    kept = Protected(Path(config.run.store or default_store_path()), Path(config.run.cache_dir or default_cache_dir()))
    check_directory(args.out, "--out")
    check_directory(issues, "--issues")
    # the files written into them are regular files bisector wrote or absent (a directory, a link, a FIFO, the
    # store, a user's file: refused now), and the directories are not the store's or the cache
    check_destinations(args.out, "--out", (MARKDOWN_FILE, JSON_FILE), REPORT_FILES, kept)
    check_destinations(issues, "--issues", (), DRAFT_FILES, kept)
    if args.html is not None:
        check_directory(args.html, "--html")
        check_directory(args.html / "issues", "--html")
        check_destinations(args.html, "--html", (PAGE, MARKDOWN_FILE), REPORT_FILES, kept)
        check_destinations(args.html / "issues", "--html", (), DRAFT_FILES, kept)
    load_env_spec(config.matrix.env, specs_dir())
    return matrix_plan(config, config.run.cache_dir or default_cache_dir()), gpus


def matrix_command(args) -> int:
    """Run ``bisector matrix``; the exit code says whether a confirmed regression was found."""
    config = load_matrix_config(_config_path(args), matrix_overrides(args))
    issues = args.issues if args.issues is not None else args.out / "issues"
    with pages_read_once():
        plan, gpus = _preflight(config, args, issues)
        store = Store(config.run.store or default_store_path())
        cache_dir = config.run.cache_dir or default_cache_dir()
        command = ["bisector", *sys.argv[1:]]
        stopped = stopped_run(store, RunKind.MATRIX, config_hash(config))
        if stopped is not None:   # the same command again continues it (same id), as the interrupt said
            print(f"continuing {shown_status(stopped)} matrix run {stopped.id} (the same grid; every stored "
                  "measurement is reused)", file=sys.stderr)
        try:
            result, runner, cells = run_matrix(config, store, cache_dir, args.baseline, command, plan,
                                               stopped.id if stopped else None, gpus)
            try:
                if args.bisect_on_regression and (result.confirmed or result.new_steps):
                    result = bisect_regressions(config, result, runner, cells, store, cache_dir, args.out)
                drafts = track(_previous_drafts(store, result), result, config.criterion)
                index = resolve_index_url(config.matrix.index_url)
                drafts = with_releases_between(drafts, lambda package: list_releases(index, package))
                result = result.model_copy(update={"issue_drafts": drafts})
                drafts = write_drafts(result, config, store, issues)
                paths = write_reports(result, args.out, issues)
                if args.html is not None:
                    paths["html"] = write_html(result, args.html, args.out, drafts)
                paths.update({f"issue draft {title}": path for title, path in drafts.items()})
            except BaseException as exc:   # the run is over: it is never left "running"
                save_run(store, config, result, RunState.FAILED if isinstance(exc, Exception) else
                         RunState.INTERRUPTED, command)
                raise
            save_run(store, config, result, RunState.DONE, command)
        finally:
            store.close()
    print(json_visible(paths["json"].read_text().rstrip()) if args.json else render_text(result, paths))
    return result.exit_code
