"""The probe's cell workers: as many at once as the memory holds (said when fewer), and a worker that
dies named for what killed it, its other cells measured all the same. Real forked processes; the
cells are plain functions here (and a real probe run at the end)."""
from __future__ import annotations

import os
import signal
import sys
import time


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(ROOT, "probes", "ga_memory"), os.path.join(ROOT, "probes")]

import _workers  # noqa: E402
from _result import _is_oom  # noqa: E402
from _workers import death, fit_in_memory, plan_workers, run_parallel  # noqa: E402

GIB = 1 << 30
CELLS = [{"hidden": h, "precision": "fp32", "ga": 1} for h in (1, 2, 3, 4)]


def test_workers_fit_the_memory_available_or_fewer_run_and_say_why():
    assert fit_in_memory(2, 14 * GIB, 22 * GIB) == (1, "2 workers asked, 1 run: a cell needs about 14.0 GiB "
                                                       "and 22.0 GiB of memory is available")
    assert fit_in_memory(4, 5 * GIB, 22 * GIB)[0] == 4 and fit_in_memory(8, 5 * GIB, 22 * GIB)[0] == 4
    assert fit_in_memory(2, None, 22 * GIB) == (2, None) and fit_in_memory(2, GIB, None) == (2, None)
    assert fit_in_memory(1, 40 * GIB, 22 * GIB) == (1, None)  # not even one fits: the probe refused before
    plan = plan_workers(2, 4, 14 * GIB, 22 * GIB)
    assert (plan["asked"], plan["used"]) == (2, 1) and plan["fewer"].startswith("2 workers asked, 1 run")
    assert plan_workers(8, 3, GIB, 22 * GIB) == {"asked": 3, "used": 3, "cell_estimate_bytes": GIB,
                                                 "available_bytes": 22 * GIB}


def test_a_worker_death_is_named_for_what_killed_it():
    killed = 9  # os.wait status of a process ended by SIGKILL
    assert death(killed, 3, 4) == ("killed: out of host memory (the kernel's OOM killer; its count in this "
                                   "cgroup went 3 -> 4)", True)
    assert death(killed, 3, 3)[1] is False and "not by the OOM killer" in death(killed, 3, 3)[0]
    assert death(killed, None, None) == ("killed: out of host memory (SIGKILL, as the kernel's OOM killer sends it)",
                                         True)
    assert death(signal.SIGSEGV, None, None) == ("worker crashed: killed by signal 11 (SIGSEGV)", False)
    assert death(1 << 8, None, None) == ("worker process exited 1 without a result", False)
    assert _is_oom(death(killed, None, None)[0]) and not _is_oom(death(killed, 3, 3)[0])


def _measure(tmp, kill_until):
    """A cell function: the cell of width 2 kills its worker (SIGKILL) on its first ``kill_until``
    attempts; the others take a moment, so that they run beside it."""
    def run_cell(spec, cell):
        if cell["hidden"] == 2:
            attempts = len(os.listdir(tmp))
            open(os.path.join(tmp, f"attempt{attempts}"), "w").close()
            if attempts < kill_until:
                os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.3)
        return {**cell, "peak_bytes": 100 * cell["hidden"], "pid": os.getpid()}
    return run_cell


def test_an_oom_killed_cell_is_measured_again_alone_and_its_worker_share_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(_workers, "oom_kills", lambda: None)  # no cgroup count: SIGKILL reads as the OOM killer
    done = []
    records = run_parallel(_measure(str(tmp_path), kill_until=1), {}, CELLS, 2, on_done=done.append)
    assert [r["peak_bytes"] for r in records] == [100, 200, 300, 400]   # plan order, every cell measured
    assert done[-1]["hidden"] == 2 and len(os.listdir(tmp_path)) == 2   # killed beside another, then alone
    assert len({r["pid"] for r in records}) == 3  # two workers, and the one that measured width 2 alone


def test_a_cell_killed_alone_is_an_out_of_host_memory_cell(tmp_path, monkeypatch):
    monkeypatch.setattr(_workers, "oom_kills", lambda: None)
    records = run_parallel(_measure(str(tmp_path), kill_until=99), {}, CELLS, 2)
    assert records[1] == {**CELLS[1], "error": "killed: out of host memory (SIGKILL, as the kernel's OOM killer "
                                                "sends it)"}
    assert [r.get("peak_bytes") for r in records] == [100, None, 300, 400]
    assert len(os.listdir(tmp_path)) == 2  # beside another worker, then once alone


def test_a_kill_the_cgroup_did_not_count_is_not_retried(tmp_path, monkeypatch):
    monkeypatch.setattr(_workers, "oom_kills", lambda: 5)
    records = run_parallel(_measure(str(tmp_path), kill_until=99), {}, CELLS, 1)
    assert records[1]["error"] == ("worker killed by SIGKILL, not by the OOM killer (the cgroup's OOM kill count "
                                   "stayed at 5)")
    assert [r.get("peak_bytes") for r in records] == [100, None, 300, 400]  # a new worker took the rest


SELF_KILLING = '''import os, signal, torch
from types import SimpleNamespace


class Tiny(torch.nn.Module):
    def __init__(self, hidden, vocab):
        super().__init__()
        self.hidden = hidden
        self.head = torch.nn.Linear(hidden, vocab)
        self.embed = torch.nn.Embedding(vocab, hidden)

    def forward(self, input_ids, labels):
        if self.hidden == 48:
            os.kill(os.getpid(), signal.SIGKILL)
        return SimpleNamespace(loss=torch.nn.functional.cross_entropy(
            self.head(self.embed(input_ids)).flatten(0, 1), labels.flatten()))


def build(hidden, layers, heads, vocab, max_positions, use_cache):
    return Tiny(hidden, vocab)
'''


