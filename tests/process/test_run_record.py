"""One writer of runs: a run killed outright (its row left ``running``) is stopped once its process is
gone, and the same job's next run continues it under its own id; a live run is never taken over."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from bisector.store.run_record import (RunRecord, config_hash, owner_alive, shown_status, stopped, stopped_run,
                                       this_owner)
from bisector.store.storage import RunKind, RunState, Store
from bisector.job.config import JobConfig

OWNER = """
import sys, time
from bisector.store.run_record import RunRecord
from bisector.store.storage import RunKind, Store
record = RunRecord(Store(sys.argv[1]), RunKind.DIFF, ["bisector", "diff"], {"x": 1}, "cafe12345678")
record.begin()
print(record.run_id, flush=True)
time.sleep(600)
"""


def test_a_run_killed_outright_is_stopped_and_its_job_continues_it(tmp_path):
    path = tmp_path / "s.db"
    proc = subprocess.Popen([sys.executable, "-c", OWNER, str(path)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        run_id = proc.stdout.readline().strip()
        store = Store(path)
        live = store.get_run(run_id)
        assert live.status == RunState.RUNNING and live.owner and owner_alive(live.owner)
        assert not stopped(live) and shown_status(live) == "running"
        assert stopped_run(store, RunKind.DIFF, "cafe12345678") is None   # never taken over while it runs
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        dead = store.get_run(run_id)
        assert dead.status == RunState.RUNNING and stopped(dead) and shown_status(dead) == "stopped"
        assert stopped_run(store, RunKind.DIFF, "cafe12345678").id == run_id
        assert stopped_run(store, RunKind.MATRIX, "cafe12345678") is None   # another kind's job
        assert stopped_run(store, RunKind.DIFF, "0000aaaa1111") is None     # another job
        again = RunRecord(store, RunKind.DIFF, ["bisector", "diff"], {"x": 1}, "cafe12345678", run_id)
        again.begin()
        again.save("found", {"answer": 1})
        rows = [r for r in store.list_runs() if r.kind is RunKind.DIFF]
        assert [(r.id, r.status, r.owner) for r in rows] == [(run_id, "found", None)]   # one run, finished
    finally:
        proc.kill()
        proc.wait()


def test_an_owner_that_cannot_be_checked_counts_as_alive():
    assert owner_alive(None) and owner_alive("")
    assert owner_alive("another-host.example:1:123")          # another host: never taken over from here
    assert owner_alive(this_owner())
    me = this_owner().split(":")
    assert not owner_alive(":".join([me[0], me[1], str(int(me[2]) + 1) if me[2].isdigit() else "1"]))  # pid reused
    assert not owner_alive(f"{me[0]}:{2 ** 22 + 12345}:1")    # no such process


def test_an_interrupted_run_is_stopped_and_a_finished_one_is_not(tmp_path):
    store = Store(tmp_path / "s.db")
    for status in (RunState.INTERRUPTED, "found"):
        record = RunRecord(store, RunKind.BISECT, ["bisector", "run"], {}, "feedbeef0000")
        record.begin()
        record.save(status)
        time.sleep(0.01)
    latest = stopped_run(store, RunKind.BISECT, "feedbeef0000")
    assert latest is None   # the latest run of the job finished: nothing to continue


def test_identical_jobs_share_a_config_hash_whatever_their_run_table():
    a = JobConfig.model_validate({"job": {"package": "p", "good": "1", "bad": "2"}, "run": {"jobs": 1}})
    b = JobConfig.model_validate({"job": {"package": "p", "good": "1", "bad": "2"}, "run": {"jobs": 4}})
    c = JobConfig.model_validate({"job": {"package": "p", "good": "1", "bad": "3"}})
    assert config_hash(a) == config_hash(b) != config_hash(c)
