"""Run a checked diff for real: on the measuring engine every command shares (its GPUs included), the offered (or, with --follow, run)
bisect of a package that is the whole difference, and the stored run with its final result."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

from bisector.bisection.wiring import bisector_for
from bisector.difference.diff_engine import Differ
from bisector.difference.diff_follow import follow_config
from bisector.difference.diff_job import CheckedDiff
from bisector.difference.diff_model import DiffResult
from bisector.job.config import RunSection
from bisector.job.argv import run_argv
from bisector.measure.assembly import build_engine
from bisector.store.storage import Store


def run_diff(checked: CheckedDiff, store: Store, cache_dir: Optional[Path] = None,
             env_backend: Optional[str] = None, handler=None, command: Optional[list[str]] = None) -> DiffResult:
    """Measure the diff (resuming from ``store``), then follow a package culprit when asked."""
    command = command or ["bisector", "diff"]
    engine = build_engine(RunSection(cache_dir=cache_dir, env_backend=env_backend), store)
    differ = Differ(checked.job, checked.candidate, checked.spec, engine, handler=handler, command=command)
    for text in checked.notes:
        differ.note(text)
    result = differ.run()
    result.command = shlex.join(command)
    followed = follow_config(checked.job, result, cache_dir, env_backend)
    if followed is not None:
        words = run_argv(followed)
        result.follow_command = shlex.join(words)
        if checked.job.follow:
            differ.note(f"following {result.minimal[0].describe()}: {result.follow_command}")
            result.followed = bisector_for(followed, store, handler=handler, command=words, engine=engine).run()
        else:
            differ.note(f"bisect {result.minimal[0].name} between its two versions with: {result.follow_command}")
    result.notes = list(differ.notes)
    differ.save(result)
    return result
