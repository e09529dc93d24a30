"""``bisector matrix``: load the [matrix] job, run it, bisect what moved, write and print the reports.

Exit codes: 0 no regression, 1 confirmed regression, 2 usage or config error (raised as
:class:`~bisector.errors.UsageError`), 3 nothing could be measured.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from bisector.cli.args import matrix_overrides
from bisector.matrix.bisects import bisect_regressions
from bisector.matrix.grid_config import load_matrix_config
from bisector.matrix.history import save_run
from bisector.matrix.html import write_html
from bisector.matrix.grid_report import render_text, write_reports
from bisector.matrix.grid_run import run_matrix
from bisector.measure.assembly import check_executor
from bisector.paths import default_cache_dir, default_store_path
from bisector.storage import RunState, Store


def _config_path(args) -> Optional[Path]:
    if args.config is not None:
        return args.config
    return Path("bisect.toml") if Path("bisect.toml").is_file() else None


def matrix_command(args) -> int:
    """Run ``bisector matrix``; the exit code says whether a confirmed regression was found."""
    config = load_matrix_config(_config_path(args), matrix_overrides(args))
    config.probe.script()  # an unknown probe is a usage error before any work
    check_executor(config.run.executor)  # so is --executor ray without Ray
    store = Store(config.run.store or default_store_path())
    cache_dir = config.run.cache_dir or default_cache_dir()
    command = ["bisector", *sys.argv[1:]]
    try:
        result, runner, cells = run_matrix(config, store, args.baseline, command)
        if args.bisect_on_regression and (result.confirmed or result.new_steps):
            result = bisect_regressions(config, result, runner, cells, store, cache_dir, args.out)
        paths = write_reports(result, args.out)
        if args.html is not None:
            paths["html"] = write_html(result, args.html, args.out)
        save_run(store, config, result, RunState.DONE, command)
    finally:
        store.close()
    print(paths["json"].read_text().rstrip() if args.json else render_text(result, paths))
    return result.exit_code
