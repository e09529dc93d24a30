"""The ``bisector`` command: one clear line and an exit code for every failure, tracebacks with --debug.

``run`` reads the job (bisect.toml and flags), hands it to the bisect driver and prints the report;
``matrix``, ``probe`` and ``envs`` are in their own modules next to this one.
"""
from __future__ import annotations

import logging
import datetime as dt
import os
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Optional

from bisector.bisection.repro_check import record, verify
from bisector.bisection.repro_script import repro_script
from bisector.bisection.wiring import bisector_for, preflight
from bisector.cli.args import glue_dash_values
from bisector.cli.overrides import run_overrides
from bisector.cli.subcommands import build_parser
from bisector.cli.cmd_diff import diff_command
from bisector.cli.cmd_envs import envs_command
from bisector.cli.cmd_matrix import matrix_command
from bisector.cli.cmd_probe import probe_command
from bisector.cli.cmd_store import store_command
from bisector.cli.resumed import interrupted_run, resumed, shown
from bisector.cli.run_kinds import log_text, pick_run, report_text
from bisector.job.config import JobConfig
from bisector.job.jobfile import load_config
from bisector.job.probe_spec import builtin_names, builtin_version
from bisector.data import VERSION
from bisector.errors import BisectorError, UsageError
from bisector.paths import default_store_path
from bisector.process.procs import SHUTDOWN, Interrupted, request_shutdown, stop_all
from bisector.redact import RedactingStream, redact_text
from bisector.report.culprit_lines import through_companion
from bisector.console.live import progress_for, showing
from bisector.console.progress import PrintHandler, console_width, wrapped
from bisector.report.render import load_result, render, render_json, write_reports
from bisector.safety.safe_text import error_line, one_line, visible
from bisector.report.text import render_text
from bisector.safety.safe_write import check_output_file, write_atomic
from bisector.sources.index import pages_read_once
from bisector.store.run_record import shown_status
from bisector.store.storage import RunKind, RunRow, Store


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
        config, command, run_id = resumed(args, config_path, _reading(args.store))
    else:
        config = load_config(config_path, run_overrides(args))
        where = Path(config.run.store or default_store_path())
        stopped = interrupted_run(Store(where, read_only=True) if where.is_file() else None, config)
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


def cmd_log(args) -> int:
    """A stored run's git-bisect-style log (any kind; default: the latest finished run, of --kind)."""
    store = _reading(args.store)
    if store is None:
        raise UsageError(f"no run {shown(args.run)} in {default_store_path()}" if args.run
                         else f"no runs in {default_store_path()}")
    print(log_text(store, chosen_run(store, args)))
    return 0


def chosen_run(store: Store, args) -> RunRow:
    """The run ``log`` and ``report`` show: the one named; else the latest finished run of ``--kind``;
    else the latest finished bisect (what a run left to read usually is), or with none the latest
    finished run of any kind. Which one is said on stderr when none was named."""
    kind = args.kind
    if not args.run and not kind and any(r.kind is RunKind.BISECT and r.result for r in store.list_runs()):
        kind = RunKind.BISECT
    run = pick_run(store, args.run, kind)
    if not args.run:
        print(f"bisector: run {run.id}, the latest finished {run.kind} run ({one_line(_what(run))}; `bisector runs` lists "
              "them all)", file=sys.stderr)
    return run


def _what(run) -> str:
    job = run.config.get("job") or {}
    if run.kind is RunKind.BISECT:
        return f"{job.get('package')} {job.get('good')}..{job.get('bad')}"
    if run.kind is RunKind.DIFF:
        return f"{run.config.get('package')} {run.config.get('version')}: A vs B"
    if run.kind is RunKind.PROBE:
        return f"{run.config.get('package')} {run.config.get('version')}"
    return ", ".join((run.config.get("matrix") or {}).get("grid", {}) or []) or "-"


def _utc(stamp: str) -> str:
    """'2026-12-02T14:02:37Z' for any stored ISO time (with or without fractions, 'Z' or an offset)."""
    try:
        when = dt.datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return stamp
    when = when.replace(tzinfo=dt.timezone.utc) if when.tzinfo is None else when.astimezone(dt.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def cmd_runs(args) -> int:
    """The stored runs, oldest first: a header, aligned columns, a total."""
    store = _reading(args.store)
    if store is None:
        print(f"no runs yet (no store at {default_store_path()})", file=sys.stderr)
        return 0
    runs = [r for r in store.list_runs() if not args.kind or r.kind == args.kind]
    rows = [("run", "config", "updated", "kind", "status", "what")]
    rows += [(r.id, r.config_hash or "-", _utc(r.updated), str(r.kind), shown_status(r), one_line(_what(r)))
             for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    kinds = Counter(str(r.kind) for r in runs)
    print(f"{len(runs)} run(s)" + (": " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) if runs else ""))
    return 0


def cmd_report(args) -> int:
    """A stored run's report in --format (any kind; default: the latest finished run, of --kind); with
    --repro, a bisect's repro script written and verified."""
    if args.repro is not None:   # a link, a directory, an unwritable place: refused before anything is read
        args.repro = check_output_file(args.repro, "--repro")
    store = _reading(args.store)
    if store is None:
        raise UsageError(f"no finished runs in {default_store_path()}")
    run = chosen_run(store, args)
    if args.repro is not None:
        if run.kind is not RunKind.BISECT:
            raise UsageError(f"--repro needs a bisect run; {run.id} is a {run.kind} run")
        args.run = run.id
        return _repro(args, Store(store.path))
    text = report_text(store, run, args.format, full=args.full)
    print(wrapped(text, console_width(sys.stdout)) if args.format == "text" else text)
    return 0


def _repro(args, store: Store) -> int:
    """Write the run's repro script to --repro, build two fresh environments from its install lines and run
    it in each (bisection.repro_check), store what it printed in the run and print the report; exit 0 when
    it reproduces the step, 3 when not."""
    result = load_result(store, args.run)
    run = store.get_run(result.run_id)
    followed = through_companion(result)
    config = JobConfig.model_validate((store.get_run(followed.run_id) if followed else run).config)
    path: Path = args.repro
    script = repro_script(result, config, path.name)
    # attached to a public issue: no secret in it; a new file renamed into place, executable
    write_atomic(path, redact_text(script.text, home=False), mode=0o755)
    print(f"wrote {one_line(str(path))}; running it in fresh environments built from its header", file=sys.stderr)
    with pages_read_once(), showing(progress_for()):
        repro = verify(store, result, config, path, script, args.cache_dir)
    result = record(store, run, repro)
    write_reports(store, result)
    text = render(result, args.format, full=args.full)
    print(wrapped(text, console_width(sys.stdout)) if args.format == "text" else text)
    return 0 if repro.verified else 3


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
    """-v: bisector's INFO lines (builds, installer steps) on stderr; -q: errors only."""
    logger = logging.getLogger("bisector")
    if getattr(args, "verbose", False):
        if not logger.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(_VisibleFormatter("bisector: %(message)s"))
            logger.addHandler(handler)
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


def _main(argv: list[str]) -> int:
    args = _parse(argv)
    if isinstance(args, int):
        return args
    _logging(args)
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
