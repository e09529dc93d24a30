"""Run a checked diff for real: on the measuring engine every command shares (its GPUs included), the offered (or, with --follow, run)
bisect of a package that is the whole difference, and the stored run with its final result."""
from __future__ import annotations

import sys
from typing import Optional

from bisector.bisection.wiring import bisector_for
from bisector.difference.diff_engine import Differ
from bisector.difference.diff_follow import follow_config
from bisector.difference.diff_job import CheckedDiff
from bisector.difference.diff_model import DiffAnswer, DiffResult, Followed
from bisector.job.config import RunSection
from bisector.job.argv import run_argv
from bisector.job.commandline import joined
from bisector.measure.assembly import build_engine
from bisector.store.run_record import shown_status, stopped_run
from bisector.store.storage import RunKind, Store


def run_diff(checked: CheckedDiff, store: Store, run: Optional[RunSection] = None, handler=None,
             command: Optional[list[str]] = None) -> DiffResult:
    """Measure the diff on the engine ``run`` (the execution flags) gives; the same diff stopped before its
    end (interrupted, or killed) is continued under its own id; then follow a package culprit when asked."""
    command, run = command or ["bisector", "diff"], run or RunSection()
    engine = build_engine(run, store)
    stopped = stopped_run(store, RunKind.DIFF, checked.job.config_hash)
    if stopped is not None:
        print(f"continuing {shown_status(stopped)} diff {stopped.id} (the same diff; every stored measurement is "
              "reused)", file=sys.stderr)
    differ = Differ(checked.job, checked.candidate, checked.spec, engine, handler=handler, command=command,
                    run_id=stopped.id if stopped else None)
    for text in checked.notes:
        differ.note(text)

    def follow(answer: DiffAnswer) -> Followed:
        """The bisect of the package that is the whole difference: offered, or with --follow run."""
        config = follow_config(checked.job, answer, run.cache_dir, run.env_backend)
        if config is None:
            return Followed()
        words = run_argv(config)
        if not checked.job.follow:
            differ.note(f"bisect {answer.minimal[0].name} between its two versions with: {joined(words)}")
            return Followed(words)
        differ.note(f"following {answer.minimal[0].describe()}: {joined(words)}")
        return Followed(words, bisector_for(config, store, handler=handler, command=words, engine=engine).run())

    return differ.run(follow)
