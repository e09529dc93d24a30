"""The command meter changes nothing, exit included, and reads the processes that did the work.

Under ``torchrun`` and ``accelerate launch`` (2 processes, gloo on the CPU), for scripts that end with and without
``destroy_process_group``: the same exit code, stdout and losses with and without the meter. A launcher that
steps no optimizer is never a rank; a failure's reason is the failing rank's error, not the launcher's summary.
(bench/meter_exits.py repeats the first check 20 times each way and counts the exits.)
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.command_meter import DDP, MB, clean_env, launch, meter, plain, write

pytest.importorskip("accelerate")


@pytest.mark.parametrize("destroy", [True, False])
@pytest.mark.parametrize("how", ["torchrun", "accelerate"])
def test_two_ranks_exit_print_and_compute_the_same_with_and_without_the_meter(tmp_path, how, destroy):
    write(tmp_path, "ddp.py", DDP.format(steps=3, mb=MB, destroy=destroy))
    argv = launch(how, 2, "ddp.py")
    alone = _plain_past_teardown_aborts(tmp_path, argv)
    done, r = meter(tmp_path, *argv, timeout=300)
    assert alone.returncode == done.returncode == 0, (alone.stderr[-2000:], done.stderr[-2000:])
    lines = sorted(line for line in alone.stdout.splitlines() if line.startswith("rank "))
    assert len(lines) == 6 and lines == sorted(line for line in done.stdout.splitlines() if line.startswith("rank "))
    assert [(x["rank"], x["steps"]) for x in r["ranks"]] == [(0, 3), (1, 3)]


def _plain_past_teardown_aborts(tmp_path, argv, tries=3):
    """The plain run, the baseline: run again (up to ``tries`` times in all) when a rank aborted in torch's own
    teardown after printing every line ("terminate called without an active exception", SIGABRT): that happens
    without the meter (bench/meter_exits.py: 4 of 80 plain two-rank runs), and is no meter's doing. The metered
    side gets no second try."""
    for _ in range(tries):
        alone = plain(tmp_path, *argv, timeout=300)
        printed = sum(line.startswith("rank ") for line in alone.stdout.splitlines())
        if alone.returncode == 0 or "SIGABRT" not in alone.stderr or printed != 6:
            return alone
    return alone


def test_a_launcher_that_steps_nothing_is_never_a_rank_nor_read_for_whole_run_metrics(tmp_path):
    """An inference script under accelerate launch: no process steps; the whole-run metrics and the one
    "rank" are the process that ran the model, never the launcher (which imported torch too)."""
    write(tmp_path, "infer.py", """
        import os, torch
        x = torch.ones(3_000_000)
        print(float((x * 2).sum()), os.getpid())
        """)
    done, r = meter(tmp_path, *launch("accelerate", 1, "infer.py"), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    worker = int(done.stdout.split()[-1])
    assert r["processes"] == 2 and [x["pid"] for x in r["ranks"]] == [worker]
    assert 24_000_000 <= r["metrics"]["peak_bytes"] < 24_100_000 and r["scope"].startswith("whole run")


FAILS = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise RuntimeError("rank one broke at step 0")
dist.barrier()
"""


@pytest.mark.parametrize("how", ["torchrun", "accelerate"])
def test_a_failures_reason_is_the_failing_ranks_error_not_the_launchers_summary(tmp_path, how):
    from bisector.core.measurement import Status
    from bisector.job.probe import ProgramProbe
    from bisector.measure.probe_process import run_probe

    write(tmp_path, "fails.py", FAILS)
    spec = ProgramProbe(command=launch(how, 2, "fails.py"), cwd=tmp_path, timeout=300)
    outcome = run_probe(spec, Path(sys.executable), clean_env())
    assert outcome.status is Status.CRASHED and outcome.exit_code == 1
    assert outcome.reason.startswith("probe exited 1: RuntimeError: rank one broke at step 0 (rank 1, pid "), \
        outcome.reason
    assert "the first error among the command's processes" in outcome.reason


def test_an_uncaught_error_on_a_thread_is_the_reason_and_still_printed_as_before(tmp_path):
    write(tmp_path, "t.py", """
        import sys, threading, torch
        t = threading.Thread(target=lambda: 1 / 0, name="loader")
        t.start(); t.join()
        sys.exit(4)
        """)
    alone = plain(tmp_path, sys.executable, "t.py")
    done, r = meter(tmp_path, sys.executable, "t.py")
    assert alone.returncode == done.returncode == 4 and r is None
    lines = done.stderr.strip().splitlines()
    assert lines[:-1] == alone.stderr.strip().splitlines()   # the program's own output, as it was
    assert lines[-1] == "ZeroDivisionError: division by zero"   # then the reason, for the host
