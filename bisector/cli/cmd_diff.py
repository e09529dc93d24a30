"""``bisector diff``: two setups at one version, the smallest difference that explains the metric.

    bisector diff --with accelerate==0.22.0 --a-arg=--loop=trainer --b-arg=--loop=accelerate
    bisector diff --package transformers --a-lock reporter.txt --b-lock maintainer.txt --metric ... --json

Probe arguments start with dashes, so give them as ``--a-arg=--loop=trainer``. The flags are
bisector.cli.subcommands's ``_diff_parser``.
"""
from __future__ import annotations

import argparse
import os
import sys

from bisector.cli.args import CRITERION_FLAGS
from bisector.cli.overrides import probe_overrides, run_section
from bisector.measure.assembly import check_executor
from bisector.difference.diff_job import DiffInput, check
from bisector.difference.diff_model import DiffResult
from bisector.difference.diff_report import render_diff_json, render_diff_text
from bisector.difference.diff_run import run_diff
from bisector.paths import default_store_path
from bisector.console.live import progress_for, showing
from bisector.console.progress import PrintHandler
from bisector.sources.index import pages_read_once
from bisector.store.storage import RunKind, Store
from bisector.store.integrity import check_run_paths


def diff_input(args: argparse.Namespace) -> DiffInput:
    """The flags as what the diff was asked for."""
    criterion = {flag.lstrip("-").replace("-", "_"): getattr(args, flag.lstrip("-").replace("-", "_"), None)
                 for flag, *_ in CRITERION_FLAGS}
    return DiffInput(package=args.package, pins=args.with_, a_pins=args.a_with, b_pins=args.b_with,
                     a_lock=args.a_lock, b_lock=args.b_lock, a_args=args.a_arg, b_args=args.b_arg,
                     a_env=args.a_env, b_env=args.b_env,
                     probe=probe_overrides(args), criterion=criterion, env=args.env, index_url=args.index_url,
                     follow=args.follow, follow_repo=args.follow_repo)


def diff_command(args) -> int:
    """Check everything, then measure; print each trial as a step and the report (text or JSON)."""
    with pages_read_once():
        checked = check(diff_input(args))          # bad input stops here: nothing created or stored
        run = run_section(args)
        check_executor(run.executor, run.ray_address)
        check_run_paths(run.store, run.cache_dir)
        store = Store(run.store or default_store_path())
        try:
            with showing(progress_for(open(os.devnull, "w") if args.quiet else None)) as say:
                result = run_diff(checked, store, run, handler=PrintHandler(printer=say),
                                  command=["bisector", *sys.argv[1:]])
        finally:
            store.close()
    print(render_diff_json(result) if args.json else render_diff_text(result))
    return result.exit_code


def report_diff(store: Store, run_id, fmt: str):
    """A stored diff run's report (text, or JSON for --format json), or None when the run is not a diff."""
    run = store.get_run(run_id)
    if run is None or run.kind is not RunKind.DIFF or not run.result:
        return None
    result = DiffResult.model_validate(run.result)
    return render_diff_json(result) if fmt == "json" else render_diff_text(result)
