"""The command meter's records turned into a result (probes/command/_aggregate.py) and a failure into its reason
(bisector/measure/probe_process.py): which processes did the work, and what ended a failed command."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bisector.core.measurement import Status
from bisector.measure.probe_process import _failure
from bisector.process.procs import Completed

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "probes" / "command"))
from _aggregate import failure_line, ranks, summarize  # noqa: E402


def _proc(pid, ppid, rank=None, steps=(), forked=False, end=True, raised=(), torch=True):
    return pid, {"load": {"pid": pid, "ppid": ppid, "rank": rank, "forked": forked},
                 "torch": {"meter": "cpu-dispatch", "device": "cpu"} if torch else None,
                 "steps": [{"i": i, "peak_bytes": p, "run_peak_bytes": p, "seconds": 0.1, **extra}
                           for i, (p, extra) in enumerate(steps)],
                 "end": {"wall": 1.0, "max_rss": 100 + pid, "run_peak_bytes": 5 + pid} if end else None,
                 "errors": [], "raised": list(raised), "lost": []}


def test_without_steps_a_launcher_is_no_rank_and_no_whole_run_metric_is_its():
    launcher, worker = _proc(10, 1), _proc(11, 10, rank="0")
    metrics, facts = summarize(dict([launcher, worker]), 1, 2.0)
    assert [r["pid"] for r in facts["ranks"]] == [11] and metrics["peak_bytes"] == 16
    assert metrics["rss_peak_bytes"] == 111   # the worker's, though the launcher's pid gives it less here
    metrics, facts = summarize(dict([_proc(10, 1), _proc(11, 10, forked=True)]), 1, 2.0)   # a DataLoader worker
    assert [r["pid"] for r in facts["ranks"]] == [10]


def test_a_forked_child_that_trains_is_a_rank_of_its_own_never_its_parents_number():
    parent = _proc(20, 1, rank="0", steps=[(50, {}), (10, {})])
    child = _proc(21, 20, rank="0", steps=[(60, {}), (30, {})], forked=True, end=False)
    got = [(rank, pid) for rank, pid, _ in ranks(dict([child, parent]))]
    assert got == [(0, 20), (1, 21)]
    metrics, facts = summarize(dict([child, parent]), 1, 2.0)
    assert metrics["step_peak_bytes.rank1"] == 30 and facts["ranks"][1]["forked_from"] == 20


def test_a_step_on_a_thread_the_meter_could_not_see_is_an_absence_never_a_number():
    late = "thread 'trainer' ran tensor ops the meter could not see before this step"
    proc = _proc(30, 1, steps=[(0, {"uncounted": late}), (10, {}), (12, {})])
    metrics, facts = summarize(dict([proc]), 1, 2.0)
    assert metrics["step_peak_bytes"] == 12 and "peak_bytes" not in metrics
    assert facts["absent"]["peak_bytes"] == f"threads: not counted ({late})"
    metrics, facts = summarize(dict([proc]), 0, 2.0)
    assert "step_peak_bytes" not in metrics and facts["threads"].startswith(f"threads: not counted ({late};")


def test_the_reason_is_the_first_error_of_a_worker_never_the_launchers_summary():
    launcher = _proc(10, 1, raised=[{"line": "subprocess.CalledProcessError: Command '['python', ...", "t": 5.0}])
    rank0 = _proc(11, 10, rank="0", end=False, raised=[{"line": "RuntimeError: Connection closed by peer", "t": 3.0}])
    rank1 = _proc(12, 10, rank="1", end=False, raised=[{"line": "ValueError: bad batch", "t": 2.0}])
    procs = dict([launcher, rank0, rank1])
    assert failure_line(procs) == "ValueError: bad batch (rank 1, pid 12: the first error among the command's processes)"
    assert failure_line(procs, (3, 4)).startswith("out of memory: the kernel's OOM killer killed a process")
    quiet = dict([_proc(10, 1), _proc(11, 10, rank="0", end=False), _proc(12, 10, rank="1")])
    assert failure_line(quiet) == ("rank 0, pid 11 of the command ended without finishing and without a Python "
                                   "error (killed by a signal, or os._exit)")
    alone = dict([_proc(11, 1, end=False, raised=[{"line": "ValueError: bad batch", "t": 2.0}])])
    assert failure_line(alone) == "ValueError: bad batch"   # one process: its error as it printed it
    finished = dict([launcher, _proc(11, 10, rank="0")])
    assert failure_line(finished) is None   # the launcher's own line is already the last one it printed


def _killed(sig: int, stderr: str = "") -> tuple[Status, str]:
    return _failure(Completed(-sig, "", stderr, 1.0, False))


@pytest.mark.parametrize("said, status, reason", [
    ("", Status.OOM, "killed (SIGKILL), likely out of memory"),
    ("killed (SIGKILL): out of memory (the kernel's OOM killer: the cgroup's oom_kill count went 0 -> 1)",
     Status.OOM, "killed (SIGKILL): out of memory (the kernel's OOM killer: the cgroup's oom_kill count went 0 -> 1)"),
    ("killed (SIGKILL), not by the out-of-memory killer (the cgroup's oom_kill count stayed at 0)",
     Status.CRASHED, "killed (SIGKILL), not by the out-of-memory killer (the cgroup's oom_kill count stayed at 0)"),
])
def test_sigkill_is_out_of_memory_as_far_as_the_cgroup_tells(said, status, reason):
    assert _killed(9, f"some output\n{said}\n") == (status, reason)


def test_other_signals_are_named_crashes():
    assert _killed(11) == (Status.CRASHED, "probe killed by signal 11 (SIGSEGV)")


def test_a_failure_the_probe_already_calls_out_of_memory_is_said_once():
    line = "out of memory: the kernel's OOM killer killed a process of the command (the cgroup's oom_kill count went 0 -> 1)"
    assert _failure(Completed(1, "", f"Traceback ...\n{line}\n", 1.0, False)) == (Status.OOM, line)
    assert _failure(Completed(1, "", "MemoryError\n", 1.0, False)) == (Status.OOM, "out of memory: MemoryError")
