"""The ``bisector`` command: one clear line and an exit code for every failure, tracebacks with --debug."""
from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Optional

from .cli_args import build_parser, overrides
from .config import load_config
from .errors import BisectorError, UsageError
from .paths import default_cache_dir, default_store_path
from .procs import SHUTDOWN, Interrupted, request_shutdown, stop_all
from .redact import redact_text
from .store import Store


def _on_signal(signum, frame):  # exercised by the reliability tests with real signals
    """Ctrl-C or SIGTERM: stop every child (workers see the shutdown flag), then unwind (once)."""
    if SHUTDOWN.is_set():
        return
    request_shutdown()
    raise Interrupted()


def _store(path: Optional[Path]) -> Store:
    return Store(path or default_store_path())


def cmd_run(args) -> int:
    config_path = args.config
    if config_path is None and Path("bisect.toml").is_file():
        config_path = Path("bisect.toml")
    command = ["bisector", *sys.argv[1:]]
    if args.resume is not None:
        config, command = _resumed(args)
    else:
        config = load_config(config_path, overrides(args))
    config.probe.script()  # an unknown probe is a usage error before any work
    from .driver import Bisector
    from .progress import PrintHandler
    store = _store(config.run.store)
    bisector = Bisector(config, store, config.run.cache_dir or default_cache_dir(),
                        handler=PrintHandler(quiet=args.json), command=command)
    result = bisector.run()
    from .report import write_reports, render_json, render_text
    write_reports(store, result)
    if args.json:
        print(render_json(result))
    else:
        print(render_text(result))
    return result.exit_code


def _resumed(args):
    """The configuration and command of a stored run, for --resume [RUN]."""
    from .config import JobConfig
    store = _store(args.store)
    run = store.get_run(args.resume or None)
    if run is None or run.kind != "bisect":
        raise UsageError(f"no bisect run {args.resume!r} to resume in {store.path}")
    print(f"resuming run {run.id}: {' '.join(run.command)}", file=sys.stderr)
    return JobConfig.model_validate(run.config), run.command


def cmd_log(args) -> int:
    from .report import render_log
    store = _store(args.store)
    run = store.get_run(args.run)
    if run is None:
        raise UsageError(f"no run {args.run!r} in {store.path}" if args.run else f"no runs in {store.path}")
    print(render_log(store, run))
    return 0


def cmd_runs(args) -> int:
    store = _store(args.store)
    for run in store.list_runs():
        job = run.config.get("job") or {}
        what = (f"{job.get('package')} {job.get('good')}..{job.get('bad')}" if run.kind == "bisect"
                else ", ".join((run.config.get("matrix") or {}).get("grid", {}) or []) or "-")
        print(f"{run.id}  {run.updated}  {run.kind:7s} {run.status:15s} {what}")
    return 0


def cmd_report(args) -> int:
    from .report import load_result, render
    store = _store(args.store)
    result = load_result(store, args.run)
    print(render(result, args.format))
    return 0


def cmd_envs(args) -> int:
    from .envcli import envs_command
    return envs_command(args)


def cmd_probe(args) -> int:
    from .probe_one import probe_command
    return probe_command(args)


def cmd_matrix(args) -> int:
    from .matrix_cli import matrix_command
    return matrix_command(args)


COMMANDS = {"matrix": cmd_matrix, "run": cmd_run, "log": cmd_log, "runs": cmd_runs, "report": cmd_report, "envs": cmd_envs,
            "probe": cmd_probe}


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--debug"):
        argv = ["run", *argv]
    if argv == ["--debug"]:
        argv = ["--debug", "run"]
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            args = parser.parse_args([*argv, "run"])
    except SystemExit as exc:  # --help, or a usage error already printed as one line
        return int(exc.code or 0)
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
        print(f"bisector: error: {redact_text(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - last resort: one line, not a traceback
        if args.debug:
            raise
        print(f"bisector: internal error: {type(exc).__name__}: {redact_text(str(exc))} "
              "(rerun with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
