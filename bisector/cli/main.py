"""The ``bisector`` command: one clear line and an exit code for every failure, tracebacks with --debug.

``run`` reads the job (bisect.toml and flags), hands it to the bisect driver and prints the report;
``matrix``, ``probe`` and ``envs`` are in their own modules next to this one.
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Optional

from bisector.bisection.wiring import bisector_for, preflight
from bisector.cli.args import build_parser, glue_dash_values, run_overrides
from bisector.cli.cmd_diff import diff_command, report_diff
from bisector.cli.cmd_envs import envs_command
from bisector.cli.cmd_matrix import matrix_command
from bisector.cli.cmd_probe import probe_command
from bisector.cli.cmd_store import store_command
from bisector.config import JobConfig, validated
from bisector.jobfile import load_config
from bisector.errors import BisectorError, UsageError
from bisector.paths import default_store_path
from bisector.procs import SHUTDOWN, Interrupted, request_shutdown, stop_all
from bisector.redact import RedactingStream
from bisector.report.live import progress_for, showing
from bisector.report.progress import PrintHandler
from bisector.report.render import load_result, render, render_json, write_reports
from bisector.report.text import render_log, render_text
from bisector.sources.index import pages_read_once
from bisector.storage import RunKind, Store


def _on_signal(signum, frame):  # exercised by the reliability tests with real signals
    """Ctrl-C or SIGTERM: stop every child (workers see the shutdown flag), then unwind (once)."""
    if SHUTDOWN.is_set():
        return
    request_shutdown()
    raise Interrupted()


def _store(path: Optional[Path]) -> Store:
    return Store(path or default_store_path())


def _reading(path: Optional[Path]) -> Optional[Store]:
    """The store for a command that only reads it: never created; None when the default store does
    not exist yet (nothing measured), a one-line error when a named one does not."""
    if path is None and not default_store_path().is_file():
        return None
    return Store(path or default_store_path(), read_only=True)


def cmd_run(args) -> int:
    """Bisect; print the report (text, or JSON with --json); exit 0 with an answer, 3 without."""
    config_path = args.config
    if config_path is None and Path("bisect.toml").is_file():
        config_path = Path("bisect.toml")
    command = ["bisector", *sys.argv[1:]]
    if args.resume is not None:
        config, command = _resumed(args)
    else:
        config = load_config(config_path, run_overrides(args))
    with pages_read_once():
        preflight(config)  # bad input is one line and exit 2 before anything is created or stored
        store = _store(config.run.store)
        with showing(progress_for()) as say:
            result = bisector_for(config, store, handler=PrintHandler(printer=say), command=command).run()
    write_reports(store, result)
    if args.json:
        print(render_json(result))
    else:
        print(render_text(result))
    return result.exit_code


def _resumed(args):
    """The configuration and command of a stored run, for --resume [RUN]: its own job, probe and criterion
    (a flag that would change them is refused, not ignored); [run] flags (how to run it) apply."""
    overrides = run_overrides(args)
    changing = [key for table in ("job", "probe", "criterion") for key, value in overrides[table].items()
                if value is not None] + (["config"] if args.config is not None else [])
    if changing:
        flags = ", ".join(f"--{key.replace('_', '-')}" for key in changing)
        raise UsageError(f"--resume reruns a stored run with its own configuration; {flags} would change it "
                         "(start a new run without --resume)")
    store = _reading(args.store)
    run = store.get_run(args.resume or None) if store else None
    if store is None:
        raise UsageError("no stored runs to resume (nothing has been measured yet)")
    if run is None or run.kind is not RunKind.BISECT:
        raise UsageError(f"no bisect run {_shown(args.resume)} to resume in {store.path}")
    print(f"resuming run {run.id}: {' '.join(run.command)}", file=sys.stderr)
    data = run.config
    data["run"] = {**(data.get("run") or {}), **{k: v for k, v in overrides["run"].items() if v is not None}}
    return validated(JobConfig, data, f"run {run.id}"), run.command


def _shown(run_id: Optional[str]) -> str:
    """A run id as an error message quotes it (a pasted novel is cut)."""
    return repr(run_id if run_id is None or len(run_id) <= 40 else run_id[:40] + "...")


def cmd_log(args) -> int:
    """A stored run's git-bisect-style log."""
    store = _reading(args.store)
    run = store.get_run(args.run) if store else None
    if run is None:
        where = store.path if store else default_store_path()
        raise UsageError(f"no run {_shown(args.run)} in {where}" if args.run else f"no runs in {where}")
    print(render_log(store, run))
    return 0


def cmd_runs(args) -> int:
    """The stored runs, oldest first."""
    store = _reading(args.store)
    if store is None:
        print(f"no runs yet (no store at {default_store_path()})", file=sys.stderr)
        return 0
    for run in store.list_runs():
        job = run.config.get("job") or {}
        what = (f"{job.get('package')} {job.get('good')}..{job.get('bad')}" if run.kind is RunKind.BISECT
                else f"{run.config.get('package')} {run.config.get('version')}: A vs B" if run.kind is RunKind.DIFF
                else ", ".join((run.config.get("matrix") or {}).get("grid", {}) or []) or "-")
        print(f"{run.id}  {run.updated}  {run.kind:7s} {run.status:15s} {what}")
    return 0


def cmd_report(args) -> int:
    """A stored bisect's (or diff's) report in --format."""
    store = _reading(args.store)
    if store is None:
        raise UsageError(f"no finished runs in {default_store_path()}")
    diffed = report_diff(store, args.run, args.format)
    if diffed is not None:
        print(diffed)
        return 0
    result = load_result(store, args.run)
    print(render(result, args.format))
    return 0


COMMANDS = {"matrix": matrix_command, "run": cmd_run, "log": cmd_log, "runs": cmd_runs, "report": cmd_report,
            "envs": envs_command, "probe": probe_command, "diff": diff_command, "store": store_command}


def _parse(argv: list[str]):
    """The parsed arguments (``run`` when no command is named), or the exit code argparse ended with."""
    parser = build_parser()
    argv = glue_dash_values(argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--debug"):
        argv = ["run", *argv]
    if argv == ["--debug"]:
        argv = ["--debug", "run"]
    try:
        args = parser.parse_args(argv)
        return parser.parse_args([*argv, "run"]) if args.command is None else args
    except SystemExit as exc:  # --help, or a usage error already printed as one line
        return int(exc.code or 0)


def main(argv: Optional[list[str]] = None) -> int:
    """Parse ``argv`` (default: sys.argv), run the command, and return its exit code; everything it
    prints goes through the redaction pass (bisector.redact)."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(sys.stdout), RedactingStream(sys.stderr)
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    finally:
        sys.stdout, sys.stderr = streams


def _main(argv: list[str]) -> int:
    args = _parse(argv)
    if isinstance(args, int):
        return args
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        return COMMANDS[args.command](args)
    except (KeyboardInterrupt, Interrupted):
        request_shutdown()
        stop_all()
        print("bisector: interrupted; every finished measurement is stored. "
              "Run the same command again to resume.", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except BisectorError as exc:
        if args.debug:
            raise
        print(f"bisector: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:   # the machine said no (a full disk, a read-only file system): not a bug of ours
        if args.debug:
            raise
        where = f": {exc.filename}" if exc.filename else ""
        print(f"bisector: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - last resort: one line, not a traceback
        if args.debug:
            raise
        print(f"bisector: internal error: {type(exc).__name__}: {exc} "
              "(rerun with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
