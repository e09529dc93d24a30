"""The ``bisector`` command: one clear line and an exit code for every failure, tracebacks with --debug.

``run`` reads the job (bisect.toml and flags), hands it to the bisect driver and prints the report;
``matrix``, ``probe``, ``diff``, ``envs``, ``store`` and the readers of stored runs (``log``, ``runs``,
``report``: cmd_stored) are in their own modules next to this one.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import Optional

from bisector.bisection.wiring import bisector_for, preflight
from bisector.cli.args import glue_dash_values
from bisector.cli.overrides import run_job
from bisector.cli.subcommands import build_parser
from bisector.cli.cmd_diff import diff_command
from bisector.cli.cmd_envs import envs_command
from bisector.cli.cmd_matrix import matrix_command
from bisector.cli.cmd_probe import probe_command
from bisector.cli.cmd_store import store_command
from bisector.cli.cmd_stored import cmd_log, cmd_report, cmd_runs, reading_store
from bisector.cli.resumed import interrupted_run, resumed
from bisector.job.probe import builtin_names, builtin_version
from bisector.data import VERSION
from bisector.measure.program_output import OUTPUT_LOGGER

from bisector.errors import BisectorError, UsageError
from bisector.paths import default_store_path
from bisector.process.procs import SHUTDOWN, Interrupted, request_shutdown, stop_all
from bisector.redact import RedactingStream
from bisector.console.live import progress_for, showing
from bisector.console.progress import PrintHandler, console_width, wrapped
from bisector.report.render import render_json, write_reports
from bisector.safety.safe_text import error_line, visible
from bisector.report.text import render_text
from bisector.sources.index import pages_read_once
from bisector.store.run_record import shown_status
from bisector.store.storage import Store


def _on_signal(signum, frame):  # exercised by the reliability tests with real signals
    """Ctrl-C or SIGTERM: stop every child (workers see the shutdown flag), then unwind (once)."""
    if SHUTDOWN.is_set():
        return
    request_shutdown()
    raise Interrupted()


def _store(path: Optional[Path]) -> Store:
    return Store(path or default_store_path())


def progress(args):
    """The progress display: live on a terminal, plain lines otherwise, nothing with -q."""
    return progress_for(open(os.devnull, "w") if getattr(args, "quiet", False) else None)


def cmd_run(args) -> int:
    """Bisect; print the report (text, or JSON with --json); exit 0 with an answer, 3 without."""
    config_path = args.config
    if config_path is None and Path("bisect.toml").is_file():
        config_path = Path("bisect.toml")
    command, run_id = ["bisector", *sys.argv[1:]], None
    if args.resume is not None:
        config, command, run_id = resumed(args, config_path, reading_store(args.store))
    else:
        config = run_job(config_path, args)
        where = Path(config.run.store or default_store_path())
        stopped = interrupted_run(Store(where, read_only=True) if os.path.isfile(where) else None, config)
        if stopped is not None:   # the same command again continues it (same id), as the interrupt said
            run_id = stopped.id
            print(f"continuing {shown_status(stopped)} run {run_id} (the same job; every stored measurement is "
                  "reused)", file=sys.stderr)
    with pages_read_once():
        resolved = preflight(config)  # bad input is one line and exit 2 before anything is created or stored
        store = _store(config.run.store)
        with showing(progress(args)) as say:
            result = bisector_for(config, store, handler=PrintHandler(printer=say), command=command,
                                  resolved=resolved, run_id=run_id).run()
    write_reports(store, result)
    if args.json:
        print(render_json(result, full=args.full))
    else:
        print(wrapped(render_text(result, notes_shown=True), console_width(sys.stdout)))
    return result.exit_code


COMMANDS = {"matrix": matrix_command, "run": cmd_run, "log": cmd_log, "runs": cmd_runs, "report": cmd_report,
            "envs": envs_command, "probe": probe_command, "diff": diff_command, "store": store_command}


def version_text() -> str:
    """``bisector --version``: bisector's version and each built-in probe's."""
    probes = ", ".join(f"{name} {builtin_version(name) or '?'}" for name in builtin_names())
    return f"bisector {VERSION} (probes: {probes}; Python {sys.version.split()[0]})"


def usage_text(parser) -> str:
    """What a bare ``bisector`` prints: the commands and where to start."""
    commands = next(a for a in parser._actions if a.dest == "command")
    lines = [parser.format_usage().strip(), "", parser.description, "", "commands:"]
    lines += [f"  {c.dest:<8} {c.help}" for c in commands._choices_actions]
    lines += ["", "start with: bisector run   (the built-in default job: the seed report's range)",
              "more: bisector COMMAND --help"]
    return "\n".join(lines)


COMMAND_TAKERS = ("run", "probe", "diff", "matrix")   # subcommands that take a program after --


def split_command(argv: list[str]) -> tuple[list[str], Optional[list[str]]]:
    """bisector's own words, and the user's program after the first bare ``--`` (None without one)."""
    if "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def _parse(argv: list[str]):
    """The parsed arguments (``run`` when only flags are given), or the exit code it ended with."""
    parser = build_parser()
    argv, command = split_command(argv)
    argv = glue_dash_values(argv)
    if command is not None:
        if not command:
            print("bisector: error: no command after -- (bisector run ... -- python train.py)", file=sys.stderr)
            return 2
        if argv and not argv[0].startswith("-") and argv[0] not in COMMAND_TAKERS:
            print(f"bisector: error: {error_line(argv[0])} takes no command after -- (run, probe, diff and matrix do)",
                  file=sys.stderr)
            return 2
        argv = argv or ["run"]
    if not argv:
        print(usage_text(parser))
        return 0
    if argv[0] in ("-V", "--version"):
        print(version_text())
        return 0
    if argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--debug"):
        argv = ["run", *argv]
    if argv == ["--debug"]:
        argv = ["--debug", "run"]
    try:
        args = parser.parse_args(argv)
        if args.version:
            print(version_text())
            return 0
        args = parser.parse_args([*argv, "run"]) if args.command is None else args
        args.command_words = command
        return args
    except SystemExit as exc:  # --help, or a usage error already printed as one line
        return int(exc.code or 0)


class _VisibleFormatter(logging.Formatter):
    """-v lines quote installers and repositories: each shown by safe_text.visible."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record))


def _logging(args) -> None:
    """-v: bisector's INFO lines (builds, installer steps) on stderr, and the probe's output (your program's) as it
    comes, each line after its candidate and stream, never under bisector's own prefix; -q: errors only."""
    logger = logging.getLogger("bisector")
    if getattr(args, "verbose", False):
        for name, form in (("bisector", "bisector: %(message)s"), (OUTPUT_LOGGER, "%(message)s")):
            own = logging.getLogger(name)
            if not own.handlers:
                handler = logging.StreamHandler(sys.stderr)
                handler.setFormatter(_VisibleFormatter(form))
                own.addHandler(handler)
        logging.getLogger(OUTPUT_LOGGER).propagate = False
        logger.setLevel(logging.INFO)
    elif getattr(args, "quiet", False):
        logger.setLevel(logging.ERROR)


def main(argv: Optional[list[str]] = None) -> int:
    """Parse ``argv`` (default: sys.argv), run the command, and return its exit code; everything it
    prints goes through the redaction pass (bisector.redact)."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(sys.stdout), RedactingStream(sys.stderr)
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    finally:
        sys.stdout, sys.stderr = streams


READERS = ("runs", "log", "report")   # commands that only read the store: a deleted working directory does not matter


def _check_working_directory(args) -> None:
    """A command that measures or writes runs in a working directory that exists: one that was deleted under
    the shell is one line (it was ``No such file or directory`` from deep inside the run, exit 1)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        if args.command not in READERS or getattr(args, "repro", None) is not None:
            raise UsageError("the working directory no longer exists (it was deleted after the shell entered it): "
                             "cd into a directory that exists and run the command again") from None


def _main(argv: list[str]) -> int:
    args = _parse(argv)
    if isinstance(args, int):
        return args
    _logging(args)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        _check_working_directory(args)
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
        print(f"bisector: error: {error_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:   # the machine said no (a full disk, a read-only file system): not a bug of ours
        if args.debug:
            raise
        where = f": {exc.filename}" if exc.filename else ""
        print(f"bisector: error: {error_line(f'{exc.strerror or exc}{where}')}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - last resort: one line, not a traceback
        if args.debug:
            raise
        print(f"bisector: internal error: {type(exc).__name__}: {error_line(exc)} "
              "(rerun with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
