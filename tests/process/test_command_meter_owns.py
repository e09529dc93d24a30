"""What the command meter owns and what it can see: its own record files only, every thread's tensors, forked
children as processes of their own, and a program's death as what it was.

Each program is a user's, run unchanged under the real meter (probes/command).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.command_meter import LOOP, MB, clean_env, meter, plain, write

CLOSES_ALL = LOOP.format(steps=4, mb=MB) + """
import os
if True:   # as a daemonising program does: close every descriptor, then open its own file behind each number
    was_open = [int(n) for n in os.listdir("/proc/self/fd") if int(n) > 2]
    os.closerange(3, 1 << 16)
    own = os.open("mine.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    for fd in was_open:
        if fd != own:
            os.dup2(own, fd)
    w.sum().backward(); opt.step()   # one more step for the meter to record
    os.write(own, b"mine\\n")
"""


def test_a_program_that_closes_every_descriptor_keeps_its_own_file_and_the_record_says_so(tmp_path):
    write(tmp_path, "train.py", CLOSES_ALL)
    done, r = meter(tmp_path, sys.executable, "train.py")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "mine.txt").read_text() == "mine\n"   # not one byte of the meter's
    assert r["metrics"]["optimizer_steps"] == 5 and MB <= r["metrics"]["step_peak_bytes"] < MB + 8192
    assert r["ranks"][0]["lost_file"] == ["the program reused the meter's record descriptor for a file of its own"]


FORGER = LOOP.format(steps=3, mb=MB) + """
import glob, json, os, tempfile
assert not [k for k in os.environ if "RECORDS" in k]   # the environment does not say where the records are
for d in glob.glob(os.path.join(tempfile.gettempdir(), "bisector-records-*")):   # guessed: every run's place
    fake = {"kind": "step", "i": 0, "peak_bytes": 7, "run_peak_bytes": 7, "seconds": 1.0}
    try:
        with open(os.path.join(d, "999999.jsonl"), "w") as fh:
            fh.write(json.dumps({"kind": "torch", "meter": "cpu-dispatch"}) + "\\n" + json.dumps(fake) + "\\n")
        with open(os.path.join(d, f"{os.getpid()}.jsonl"), "a") as fh:   # and a line in its own process's file
            fh.write(json.dumps(fake) + "\\n")
    except OSError:
        pass
"""


def test_forged_records_are_reported_never_summed(tmp_path):
    write(tmp_path, "train.py", FORGER)
    done, r = meter(tmp_path, sys.executable, "train.py")
    assert done.returncode == 0, done.stderr[-2000:]
    assert r["processes"] == 1 and r["metrics"]["optimizer_steps"] == 3   # neither the fake process nor its step
    assert MB <= r["metrics"]["step_peak_bytes"] < MB + 8192
    rejected = r["records_rejected"]
    assert any(x.startswith("999999.jsonl:1: not signed by the meter") for x in rejected), rejected
    assert any(x.endswith("not signed by the meter (written by something else)") and not x.startswith("999999")
               for x in rejected), rejected


THREADS = """
import threading
import torch

def train(n):
    w = torch.nn.Parameter(torch.zeros(256))
    opt = torch.optim.SGD([w], lr=0.1)
    for step in range(4):
        big = torch.ones({mb} * n, dtype=torch.uint8)
        loss = (w * big[:256].float()).sum()
        del big
        loss.backward()
        opt.step()
        opt.zero_grad()

threads = [threading.Thread(target=train, args=(i + 1,)) for i in range({n})]
for t in threads:
    t.start()
    {join}
for t in threads:
    t.join()
"""


def test_a_program_that_trains_on_a_thread_gets_its_bytes(tmp_path):
    write(tmp_path, "train.py", THREADS.format(mb=MB, n=1, join=""))
    done, r = meter(tmp_path, sys.executable, "train.py")
    assert done.returncode == 0, done.stderr[-2000:]
    assert r["threads"] == "counted" and r["metrics"]["optimizer_steps"] == 4
    assert MB <= r["metrics"]["step_peak_bytes"] < MB + 8192 and {s["thread"] for s in r["steps"]} == {"Thread-1 (train)"}


def test_two_threads_with_two_optimizers_are_counted_together(tmp_path):
    """One after the other: each step's peak is the one thread's; at once: the process's live bytes."""
    write(tmp_path, "train.py", THREADS.format(mb=MB, n=2, join="t.join()"))
    done, r = meter(tmp_path, sys.executable, "train.py")
    assert done.returncode == 0, done.stderr[-2000:]
    assert r["metrics"]["optimizer_steps"] == 8 and 2 * MB <= r["metrics"]["step_peak_bytes"] < 2 * MB + 8192
    write(tmp_path, "train.py", THREADS.format(mb=MB, n=2, join=""))
    done, r = meter(tmp_path, sys.executable, "train.py")
    assert done.returncode == 0 and r["threads"] == "counted" and r["metrics"]["optimizer_steps"] == 8
    assert 2 * MB <= r["metrics"]["step_peak_bytes"] <= 3 * MB + 16384   # never 0: at most both temporaries at once


def test_a_thread_started_before_torch_is_counted_from_its_first_step_and_that_step_says_not(tmp_path):
    write(tmp_path, "train.py", """
        import threading
        go = threading.Event()
        def train():
            go.wait()
            import torch
            w = torch.nn.Parameter(torch.zeros(256)); opt = torch.optim.SGD([w], lr=0.1)
            for step in range(3):
                big = torch.ones(10_000_000, dtype=torch.uint8)
                (w * big[:256].float()).sum().backward(); del big
                opt.step()
        t = threading.Thread(target=train); t.start()
        import torch   # the main thread imports torch: the training thread was already running
        go.set(); t.join()
        """)
    done, r = meter(tmp_path, sys.executable, "train.py")
    assert done.returncode == 0 and MB <= r["metrics"]["step_peak_bytes"] < MB + 8192   # the first step left out
    assert "peak_bytes" not in r["metrics"] and r["absent"]["peak_bytes"].startswith("threads: not counted")
    done, r = meter(tmp_path, sys.executable, "train.py", args=("--measure-skip", "0"))
    assert "step_peak_bytes" not in r["metrics"] and r["threads"].startswith("threads: not counted (thread ")
    assert r["absent"]["step_peak_bytes"].startswith("threads: not counted")   # an absence with its reason, never 0


FORKS = LOOP.format(steps=4, mb=MB).replace("\n", "\n    ") + "\n"


@pytest.mark.parametrize("how", ["os.fork", "multiprocessing", "environ cleared, then os.fork"])
def test_a_forked_child_that_trains_is_measured_as_its_own_process(tmp_path, how):
    body = "def train():" + FORKS
    if how == "multiprocessing":
        body += ("import multiprocessing as mp, sys\np = mp.get_context('fork').Process(target=train)\n"
                 "p.start(); p.join(); sys.exit(p.exitcode)\n")
    else:
        body += ("import os, sys\n" + ("os.environ.clear()\n" if "cleared" in how else "")
                 + "pid = os.fork()\nif pid == 0:\n    train(); os._exit(0)\n"
                 "sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n")
    write(tmp_path, "train.py", "import torch\n" + body)
    done, r = meter(tmp_path, sys.executable, "train.py")
    assert done.returncode == 0, done.stderr[-2000:]
    assert r["processes"] == 2 and len(r["ranks"]) == 1 and r["ranks"][0]["forked_from"]
    assert r["metrics"]["optimizer_steps"] == 4 and MB <= r["metrics"]["step_peak_bytes"] < MB + 8192


def _probe(tmp_path, script):
    from bisector.job.probe import ProgramProbe
    from bisector.measure.probe_process import run_probe

    return run_probe(ProgramProbe(command=[sys.executable, script], cwd=tmp_path, timeout=120), Path(sys.executable),
                     clean_env())


def test_a_program_killed_by_sigkill_dies_the_same_under_the_meter_and_is_out_of_memory_or_said_not(tmp_path):
    from bisector.core.measurement import Status
    from probes.command._launch import oom_kills

    write(tmp_path, "killed.py", """
        import os, subprocess, torch
        x = torch.ones(1000)
        subprocess.run(["kill", "-KILL", str(os.getpid())])   # from outside, as the kernel's OOM killer does
        """)
    assert plain(tmp_path, sys.executable, "killed.py").returncode == -9
    done, r = meter(tmp_path, sys.executable, "killed.py")
    assert done.returncode == -9 and r is None   # the probe dies of the same signal: its caller sees SIGKILL
    outcome = _probe(tmp_path, "killed.py")
    assert outcome.exit_code == -9
    if oom_kills() is None:   # nothing can tell: likely out of memory, as the OOM killer is SIGKILL's usual sender
        assert outcome.status is Status.OOM and outcome.reason == "killed (SIGKILL), likely out of memory"
    else:   # the cgroup's count stayed: not the OOM killer, and said so
        assert outcome.status is Status.CRASHED
        assert outcome.reason.startswith("killed (SIGKILL), not by the out-of-memory killer (the cgroup's oom_kill")


def test_a_program_that_exhausts_its_memory_limit_is_out_of_memory_with_its_error_line(tmp_path):
    from bisector.core.measurement import Status

    write(tmp_path, "hog.py", """
        import resource, torch
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.RLIM_INFINITY))
        w = torch.nn.Parameter(torch.zeros(256)); opt = torch.optim.SGD([w], lr=0.1)
        for step in range(3):
            big = torch.ones(1 << (30 + step), dtype=torch.uint8)   # 1, 2, then 4 GiB: over the limit
            (w * big[:256].float()).sum().backward(); opt.step(); del big
        """)
    outcome = _probe(tmp_path, "hog.py")
    assert outcome.status is Status.OOM and outcome.exit_code == 1, outcome.reason
    assert "DefaultCPUAllocator: can't allocate memory" in outcome.reason
