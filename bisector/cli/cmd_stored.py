"""The commands that read stored runs: ``log`` (a run's git-bisect-style log), ``runs`` (every stored run)
and ``report`` (a run's report; with ``--repro``, a bisect's repro script written and verified in fresh
environments)."""
from __future__ import annotations

import datetime as dt
import sys
from collections import Counter
from pathlib import Path
from typing import Optional

from bisector.repro.verify import record, verify
from bisector.repro.compose import repro_script
from bisector.cli.resumed import shown
from bisector.cli.run_kinds import log_text, pick_run, report_text
from bisector.console.live import progress_for, showing
from bisector.console.progress import console_width, wrapped
from bisector.errors import UsageError
from bisector.job.config import JobConfig
from bisector.paths import default_cache_dir, default_store_path
from bisector.redact import redact_text
from bisector.report.culprit_lines import through_companion
from bisector.report.render import load_result, render, write_reports
from bisector.report.text import render_output
from bisector.safety.safe_text import one_line
from bisector.safety.destinations import Protected, refuse_destroying
from bisector.safety.safe_write import check_output_file, write_atomic
from bisector.sources.index import pages_read_once
from bisector.store.run_record import shown_status
from bisector.store.storage import RunKind, RunRow, Store


def reading_store(path: Optional[Path]) -> Optional[Store]:
    """The store for a command that only reads it: never created; None when the default store does
    not exist yet (nothing measured), a one-line error when a named one does not."""
    if path is None and not default_store_path().is_file():
        return None
    return Store(path or default_store_path(), read_only=True)



def cmd_log(args) -> int:
    """A stored run's git-bisect-style log (any kind; default: the latest finished run, of --kind)."""
    store = reading_store(args.store)
    if store is None:
        raise UsageError(f"no run {shown(args.run)} in {default_store_path()}" if args.run
                         else f"no runs in {default_store_path()}")
    run = chosen_run(store, args)
    print(render_output(store, run, args.output) if args.output is not None else log_text(store, run))
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
    store = reading_store(args.store)
    if store is None:
        print(f"no runs yet (no store at {default_store_path()})", file=sys.stderr)
        return 0
    runs = [r for r in store.list_runs() if not args.kind or r.kind == args.kind]
    if not runs:   # (an empty store: a 0-byte file is one too)
        print(f"no {args.kind + ' ' if args.kind else ''}runs in {store.path}", file=sys.stderr)
        return 0
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
    if args.repro is not None:   # the store, the cache, a user's file, a link, a directory: refused before any work
        args.repro = check_output_file(args.repro, "--repro", Protected(args.store or default_store_path(),
                                                                        args.cache_dir or default_cache_dir()))
    store = reading_store(args.store)
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
    it in each (repro.verify), store what it printed in the run and print the report; exit 0 when
    it reproduces the step, 3 when not."""
    result = load_result(store, args.run)
    run = store.get_run(result.run_id)
    followed = through_companion(result)
    config = JobConfig.model_validate((store.get_run(followed.run_id) if followed else run).config)
    path: Path = args.repro
    refuse_destroying(path, "--repro", Protected(store.path, config.run.cache_dir or default_cache_dir()))
    script = repro_script(result, config, path.name)
    # attached to a public issue: masked part by part as it was made (never as a whole: the files it embeds are
    # written back byte for byte); a new file renamed into place, executable
    write_atomic(path, script.text, mode=0o755)
    print(f"wrote {one_line(str(path))}; running it in fresh environments built from its header", file=sys.stderr)
    with pages_read_once(), showing(progress_for()):
        repro = verify(store, result, config, path, script, args.cache_dir)
    result = record(store, run, repro)
    write_reports(store, result)
    text = render(result, args.format, full=args.full)
    print(wrapped(text, console_width(sys.stdout)) if args.format == "text" else text)
    return 0 if repro.verified else 3
