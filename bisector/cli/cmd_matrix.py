"""``bisector matrix``: load the [matrix] job, run it, bisect what moved, write and print the reports.

Exit codes: 0 no regression, 1 confirmed regression, 2 usage or config error (raised as
:class:`~bisector.errors.UsageError`), 3 nothing could be measured.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from bisector.cli.args import matrix_overrides
from bisector.data import specs_dir
from bisector.envs import load_env_spec
from bisector.matrix.bisects import bisect_regressions
from bisector.matrix.grid_config import MatrixConfig, load_matrix_config
from bisector.matrix.history import save_run
from bisector.matrix.html import write_html
from bisector.matrix.grid_report import render_text, write_reports
from bisector.matrix.grid_run import matrix_cells, run_matrix
from bisector.measure.assembly import check_executor, probe_device
from bisector.paths import default_cache_dir, default_store_path
from bisector.sources.index import pages_read_once
from bisector.storage import RunState, Store
from bisector.store_health import check_directory, check_run_paths


def _config_path(args) -> Optional[Path]:
    if args.config is not None:
        return args.config
    return Path("bisect.toml") if Path("bisect.toml").is_file() else None


def _preflight(config: MatrixConfig, args) -> None:
    """Everything that can be refused before a cell is measured (or the store and cache created): the
    executor, the probe and its arguments, the store, the cache and report directories, the env spec,
    and every version of the grid on the index."""
    check_executor(config.run.executor, config.run.ray_address)  # --executor ray without Ray
    config.probe.check(probe_device(config.run.executor))
    check_run_paths(config.run.store, config.run.cache_dir)
    check_directory(args.out, "--out")
    if args.html is not None:
        check_directory(args.html, "--html")
    load_env_spec(config.matrix.env, specs_dir())
    matrix_cells(config)


def matrix_command(args) -> int:
    """Run ``bisector matrix``; the exit code says whether a confirmed regression was found."""
    config = load_matrix_config(_config_path(args), matrix_overrides(args))
    with pages_read_once():
        _preflight(config, args)
        store = Store(config.run.store or default_store_path())
        cache_dir = config.run.cache_dir or default_cache_dir()
        command = ["bisector", *sys.argv[1:]]
        try:
            result, runner, cells = run_matrix(config, store, cache_dir, args.baseline, command)
            try:
                if args.bisect_on_regression and (result.confirmed or result.new_steps):
                    result = bisect_regressions(config, result, runner, cells, store, cache_dir, args.out)
                paths = write_reports(result, args.out)
                if args.html is not None:
                    paths["html"] = write_html(result, args.html, args.out)
            except BaseException as exc:   # the run is over: it is never left "running"
                save_run(store, config, result, RunState.FAILED if isinstance(exc, Exception) else
                         RunState.INTERRUPTED, command)
                raise
            save_run(store, config, result, RunState.DONE, command)
        finally:
            store.close()
    print(paths["json"].read_text().rstrip() if args.json else render_text(result, paths))
    return result.exit_code
