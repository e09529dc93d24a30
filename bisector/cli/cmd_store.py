"""``bisector store check|recover``: is the store sound, and a new store with every readable row of a
damaged one (bisector.store.recovery). Exit 0: sound / recovered; 1: ``check`` found damage; 2: bad input."""
from __future__ import annotations

import sqlite3

from bisector.paths import default_store_path
from bisector.store.integrity import empty_file, recovery_hint
from bisector.store.recovery import check, recover
from bisector.safety.safe_text import one_line


def store_command(args) -> int:
    path = args.store or default_store_path()
    if args.action == "check":
        problems = check(path)
        if not problems:
            print(one_line(f"store {path}: ok ({_counts(path)})"))
            return 0
        shown = "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else "")
        print(one_line(f"store {path} is damaged: {shown}; {recovery_hint(path).split(', ', 1)[1]}"))
        return 1
    done = recover(path, args.out)
    copied = ", ".join(f"{t.copied} {name}" for name, t in done.tables.items() if name != "meta")
    lost = sum(t.unreadable_rows for t in done.tables.values())
    skipped = sum(t.skipped_ranges for t in done.tables.values())
    damage = f"; left out {lost} unreadable row(s) and {skipped} damaged range(s)" if lost or skipped else ""
    kept = f"; the damaged store is kept as {done.damaged_kept}" if done.damaged_kept else ""
    print(one_line(f"recovered {copied} into {done.written}{damage}{kept}"))
    return 0


def _counts(path) -> str:
    if empty_file(path):
        return "an empty file: an empty store, 0 runs, 0 measurements, 0 steps"
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return ", ".join(f"{db.execute(f'SELECT count(*) FROM {t}').fetchone()[0]} {t}"
                         for t in ("runs", "measurements", "steps"))
    except sqlite3.DatabaseError as exc:
        return f"tables unreadable: {exc}"
    finally:
        db.close()
