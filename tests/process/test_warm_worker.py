"""The warm worker (bisector/measure/warm_worker.py) seen through bisector.measure.warm_server, with this
interpreter and stdlib-only probes (tests/probes/warm_state.py): every run is a fresh copy of the
same image (its own pid, process group and session, the request's environment, arguments and working
directory, no state of an earlier run), its output, exit code and signals come through as a plain
process's would, a timeout stops its whole group, and a worker or orchestrator that ends takes its
runs with it. A probe that does not opt in, or whose imports leave the process unlike a fresh one, is
refused."""
from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bisector.data import probes_dir
from bisector.measure.probe_process import run_probe
from bisector.job.probe import BuiltinProbe, ScriptProbe
from bisector.measure import warm_pool
from bisector.measure.warm_pool import WarmPool
from bisector.measure.warm_server import WarmLost, WarmServer

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).resolve().parent.parent / "probes" / "warm_state.py"
WORKER = ROOT / "bisector" / "measure" / "warm_worker.py"


def alive(pid: int) -> bool:
    """Running (a zombie counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def server():
    s = WarmServer(Path(sys.executable), WORKER, PROBE, {**os.environ, "SHARED": "worker"})
    assert s.wait_ready(60) is None, s.refused
    yield s
    s.close()


def run(server: WarmServer, tmp_path: Path, *args: str, timeout: float = 60, **env: str):
    result = tmp_path / f"result-{len(list(tmp_path.glob('result-*')))}.json"
    run_env = {"PATH": os.environ["PATH"], "BISECTOR_RESULT": str(result), **env}
    done = server.run(list(args), run_env, tmp_path, timeout, None, [])
    state = json.loads(result.read_text())["state"] if result.exists() else None
    return done, state


def test_each_run_is_a_fresh_copy_of_the_same_image(server, tmp_path):
    states = []
    for i in range(3):
        done, state = run(server, tmp_path, f"--n={i}", f"--atexit={tmp_path / f'exit-{i}'}", MARK=str(i))
        assert done.returncode == 0 and not done.timed_out, done.stderr_tail
        states.append(state)
        assert (tmp_path / f"exit-{i}").read_text() == str(state["pid"])  # ended like an interpreter
    assert len({s["pid"] for s in states}) == 3 and all(s["ppid"] == server.pid for s in states)
    for i, s in enumerate(states):
        assert s["pgid"] == s["sid"] == s["pid"]                      # its own session and group
        assert s["env"] == {"PATH": os.environ["PATH"], "BISECTOR_RESULT": s["env"]["BISECTOR_RESULT"], "MARK": str(i)}
        assert s["argv"] == [str(PROBE), f"--n={i}", f"--atexit={tmp_path / f'exit-{i}'}"]
        assert s["cwd"] == str(tmp_path) and s["stdin_is_null"] and s["name"] == "__main__"
        assert s["runs_seen"] == 1 and s["helper_imported_before"]  # warm, yet nothing of an earlier run
    assert server.served == 3


def test_output_exit_codes_and_signals_come_through_as_a_plain_process(server, tmp_path):
    done, _ = run(server, tmp_path, "--print", "--exit=3")
    assert done.returncode == 3 and done.stdout_tail == "to stdout\n" and done.stderr_tail == "to stderr\n"
    done, state = run(server, tmp_path, "--raise")
    assert done.returncode == 1 and "RuntimeError: the probe failed on purpose" in done.stderr_tail
    assert state is not None  # what it wrote before failing stays
    assert run(server, tmp_path, f"--signal={int(signal.SIGKILL)}")[0].returncode == -signal.SIGKILL
    assert run(server, tmp_path, "--interrupt")[0].returncode == -signal.SIGINT


REPLAY = """import json, os
def warm_imports():
    os.environ.setdefault("SET_BY_IMPORTS", "1")
    os.environ.pop("DROPPED_BY_IMPORTS", None)
if __name__ == "__main__":
    json.dump({"metrics": {}, "env": dict(os.environ)}, open(os.environ["BISECTOR_RESULT"], "w"))
"""


def test_what_the_imports_did_to_the_environment_is_done_to_each_run(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(REPLAY)
    server = WarmServer(Path(sys.executable), WORKER, script, {"PATH": os.environ["PATH"], "DROPPED_BY_IMPORTS": "x"})
    try:
        assert server.wait_ready(60) is None
        envs = []
        for own in ({"DROPPED_BY_IMPORTS": "x"}, {"DROPPED_BY_IMPORTS": "x", "SET_BY_IMPORTS": "mine"}):
            result = tmp_path / f"r{len(envs)}.json"
            done = server.run([], {"PATH": os.environ["PATH"], "BISECTOR_RESULT": str(result), **own}, tmp_path, 60,
                              None, [])
            assert done.returncode == 0, done.stderr_tail
            envs.append(json.loads(result.read_text())["env"])
        assert envs[0]["SET_BY_IMPORTS"] == "1" and "DROPPED_BY_IMPORTS" not in envs[0]
        assert envs[1]["SET_BY_IMPORTS"] == "mine"  # a run's own variable is its own
    finally:
        server.close()


def test_a_timeout_stops_the_runs_whole_process_group(server, tmp_path):
    pidfile = tmp_path / "grandchild"
    done, state = run(server, tmp_path, f"--spawn={pidfile}", "--sleep=60", timeout=2)
    assert done.timed_out and done.returncode < 0
    assert not alive(state["pid"]) and wait_gone(int(pidfile.read_text()))
    assert run(server, tmp_path)[0].returncode == 0  # the worker serves on


def test_nothing_a_run_started_outlives_it(server, tmp_path):
    """A grandchild left in the run's session and a daemon that left it (double fork, setsid) are both
    gone by the time the run's end is reported, as under bisector's launcher."""
    child, daemon = tmp_path / "child", tmp_path / "daemon"
    done, state = run(server, tmp_path, f"--spawn={child}", f"--daemon={daemon}")
    assert done.returncode == 0, done.stderr_tail
    pids = int(child.read_text()), int(daemon.read_text())
    assert not any(alive(pid) for pid in pids), pids   # already gone when the run's end came back
    assert run(server, tmp_path)[0].returncode == 0    # the worker serves on


def test_a_worker_that_ends_takes_its_running_runs_with_it(tmp_path):
    server = WarmServer(Path(sys.executable), WORKER, PROBE, dict(os.environ))
    assert server.wait_ready(60) is None
    pidfile, daemon = tmp_path / "grandchild", tmp_path / "daemon"
    result = tmp_path / "r.json"

    def kill_soon():  # once the run has started its grandchild and its daemon
        for _ in range(400):
            if all(p.exists() and p.read_text() for p in (pidfile, daemon)):
                break
            time.sleep(0.05)
        os.kill(server.pid, signal.SIGKILL)   # the worker (its launcher then ends too)

    import threading

    threading.Thread(target=kill_soon, daemon=True).start()
    with pytest.raises(WarmLost, match="the warm worker ended"):
        server.run([f"--spawn={pidfile}", f"--daemon={daemon}", "--sleep=60"], {"PATH": os.environ["PATH"], "BISECTOR_RESULT": str(result)},
                   tmp_path, 60, None, [])
    state = json.loads(result.read_text())["state"]
    assert wait_gone(state["pid"])  # PR_SET_PDEATHSIG: the run dies with its worker
    assert wait_gone(int(pidfile.read_text()))  # and what it started goes with its process group
    assert wait_gone(int(daemon.read_text()))   # a daemon too: the worker's launcher finds it (a subreaper)
    server.close()


HOST = textwrap.dedent("""
    import os, sys, threading
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from bisector.measure.warm_server import WarmServer
    s = WarmServer(Path(sys.executable), Path({worker!r}), Path({probe!r}), dict(os.environ))
    assert s.wait_ready(60) is None
    env = {{"PATH": os.environ["PATH"], "BISECTOR_RESULT": {result!r}}}
    args = ["--daemon={daemon}", "--sleep=60"]
    threading.Thread(target=s.run, args=(args, env, Path({cwd!r}), 120, None, []), daemon=True).start()
    print(s.pid, s.proc.pid, flush=True)
    threading.Event().wait()
""")


def test_the_orchestrator_ending_ends_the_worker_and_its_runs(tmp_path):
    result = tmp_path / "r.json"
    code = HOST.format(root=str(Path(__file__).resolve().parents[2]), worker=str(WORKER), probe=str(PROBE),
                       result=str(result), cwd=str(tmp_path), daemon=str(tmp_path / "daemon"))
    host = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        worker, launcher = map(int, host.stdout.readline().split())
        for _ in range(400):   # the run wrote its result, then started its daemon
            if (tmp_path / "daemon").exists() and (tmp_path / "daemon").read_text():
                break
            time.sleep(0.05)
        run_pid = json.loads(result.read_text())["state"]["pid"]
        daemon = int((tmp_path / "daemon").read_text())   # it left the run's session (double fork, setsid)
        host.kill()
        host.wait()
        # nothing outlives a kill -9 of the orchestrator: the worker's launcher takes its whole tree with it
        assert all(wait_gone(pid) for pid in (launcher, worker, run_pid, daemon))
    finally:
        host.kill()


@pytest.mark.parametrize("body, why", [
    ("", "the probe does not opt in"),
    ("def warm_imports():\n    import threading\n    threading.Thread(target=threading.Event().wait, daemon=True,"
     " name='helper').start()\n", "the imports started Python threads: helper"),
    ("def warm_imports():\n    import no_such_module_here\n", "the warm-up failed: ModuleNotFoundError"),
])
def test_a_probe_that_does_not_opt_in_or_breaks_the_rules_is_refused(tmp_path, body, why):
    script = tmp_path / "probe.py"
    script.write_text(body)
    server = WarmServer(Path(sys.executable), WORKER, script, dict(os.environ))
    try:
        refused = server.wait_ready(60)
        assert refused is not None and why in refused
        assert wait_gone(server.proc.pid)
    finally:
        server.close()


def test_the_pool_runs_custom_and_refused_probes_cold_and_remembers_a_refusal(tmp_path):
    pool = WarmPool()
    try:
        env = {**os.environ, "BISECTOR_PACKAGE": "pip"}
        builtin = BuiltinProbe(name="import_cost")  # a built-in probe that does not opt in
        first = run_probe(builtin, Path(sys.executable), env, workdir=tmp_path, warm=pool.bound("here"))
        assert first.status.value == "ok" and first.metrics["import_seconds"] > 0
        assert first.launch["mode"] == "cold" and "does not opt in" in first.launch["why"]
        again = pool.run(builtin, Path(sys.executable), env, tmp_path, "here")
        assert again.done is None and again.details == first.launch and pool.alive() == []
        custom = ScriptProbe(path=PROBE)
        assert pool.run(custom, Path(sys.executable), env, tmp_path, "here").details == {
            "mode": "cold", "why": "a script probe runs as its own process"}
    finally:
        pool.close()
    off = WarmPool(enabled=False)
    assert off.run(BuiltinProbe(name="step_time"), Path(sys.executable), {}, tmp_path, "here").details["why"] == \
        "warm workers are off"


def test_the_worker_and_the_contract_name_the_same_opt_in():
    texts = {"worker": WORKER.read_text(), "contract": (probes_dir() / "_probe_contract.py").read_text()}
    assert 'HOOK = "warm_imports"' in texts["worker"] and 'WARM_HOOK = "warm_imports"' in texts["contract"]
    for probe in ("ga_memory", "step_time"):
        assert "\ndef warm_imports():" in (probes_dir() / probe / "__main__.py").read_text()


def test_the_worker_is_the_hosts_runs_by_path_in_any_environment_and_imports_the_stdlib_only():
    """It ships in bisector's package, not among the probes an author reads, and runs with a candidate
    environment's interpreter, which has no bisector: the standard library is all it may import."""
    assert not list(probes_dir().rglob("*warm_worker*")) and warm_pool.WORKER == WORKER
    imported = set()
    for node in ast.walk(ast.parse(WORKER.read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
