"""The slow half of tests/process/test_newcomer.py: its tests that build real environments and run real probes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from bisector.cli.main import main

from tests.process.test_newcomer import JOB, _read_pty, _run, index_url  # noqa: F401 (helpers and fixtures)


def test_rejected_runs_are_not_listed_or_resumed(tmp_path, index_url, capsys, env_cache, plain_spec):
    store = str(tmp_path / "s.db")
    ok = ["run", *JOB, "--good", "1.0", "--bad", "1.2", "--index-url", index_url, "--store", store,
          "--env", str(plain_spec), "--cache-dir", str(env_cache)]
    assert _run(ok, capsys)[0] == 0    # a real run creates the store
    assert _run(["run", *JOB, "--good", "1.2", "--bad", "1.0", "--index-url", index_url, "--store", store],
                capsys)[0] == 2
    assert main(["runs", "--store", store]) == 0
    listed = capsys.readouterr().out.splitlines()[1:-1]      # between the header and the total
    assert len(listed) == 1 and "no-regression" in listed[0]


def test_identical_runs_at_once_are_two_runs_and_resume_picks_by_config_hash(tmp_path, index_url, env_cache,
                                                                              plain_spec):
    store = str(tmp_path / "s.db")
    argv = [sys.executable, "-m", "bisector", "run", *JOB, "--good", "1.0", "--bad", "1.2", "--index-url", index_url,
            "--env", str(plain_spec), "--cache-dir", str(env_cache), "--store", store, "--json", "-q"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all(err == "" for _, err in outs)                  # -q: no progress lines
    ids = {json.loads(out)["run_id"] for out, _ in outs}
    assert len(ids) == 2                                      # two runs, not one overwritten
    listing = subprocess.run([sys.executable, "-m", "bisector", "runs", "--store", store], capture_output=True,
                             text=True).stdout.splitlines()
    rows = [line.split() for line in listing[1:-1]]
    assert {r[0] for r in rows} == ids and len({r[1] for r in rows}) == 1 and listing[-1] == "2 run(s): 2 bisect"
    digest = rows[0][1]
    resumed = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=600)   # this job's latest
    assert resumed.returncode == 0 and json.loads(resumed.stdout)["run_id"] in ids, resumed.stderr
    by_hash = subprocess.run([*argv, "--resume", digest[:6]], capture_output=True, text=True, timeout=600)
    assert by_hash.returncode == 0 and json.loads(by_hash.stdout)["run_id"] in ids
    other = subprocess.run([*argv[:-2], "--bad", "1.1", "--json", "--resume"], capture_output=True, text=True)
    assert other.returncode == 2 and "no bisect run of this job (config hash" in other.stderr


def test_live_progress_on_a_terminal_and_plain_lines_otherwise(tmp_path, index_url, env_cache, plain_spec):
    probe = tmp_path / "slow_probe.py"
    probe.write_text("import json, os, sys, time\nfor i in range(6):\n    print(f'working {i}', file=sys.stderr, "
                     "flush=True)\n    time.sleep(0.2)\njson.dump({'metrics': {'m': 1.0}}, "
                     "open(os.environ['BISECTOR_RESULT'], 'w'))\n")
    argv = [sys.executable, "-m", "bisector", "run", "--package", "tinypkg", "--mode", "releases", "--good", "1.0",
            "--bad", "1.2", "--index-url", index_url, "--probe", str(probe), "--metric", "m", "--threshold", "5",
            "--env", str(plain_spec), "--cache-dir", str(env_cache)]
    out, code = _read_pty([*argv, "--store", str(tmp_path / "a.db")], {**os.environ, "COLUMNS": "120"})
    assert code == 0, out
    assert "tinypkg 1.0.0: working" in out and "\x1b[" in out   # the live region, redrawn in place
    assert "step  1 releases" in out and "No regression in range" in out
    plain = subprocess.run([*argv, "--store", str(tmp_path / "b.db")], capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0 and "\x1b[" not in plain.stderr and "working" not in plain.stderr
    assert "step  1 releases" in plain.stderr and json.dumps("x")
