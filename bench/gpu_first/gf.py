"""bench/gpu_first's runner and the library its steps share (standard library only).

``python3 gf.py step NAME PLANNED CAP`` runs step ``NAME.py`` (beside this file) under the run's
budget: its own timeout is CAP seconds or what is left of ``$GF_BUDGET`` (counted from
``$GF_START``), whichever is less, and with nothing left the step is skipped and said so. The step's
output goes to ``$GF_OUT/NAME.log``; the step itself writes ``$GF_OUT/NAME.json`` (after every
check, so a kill leaves what it found); a step that ran out of time is INCOMPLETE, one that crashed
gets a failed check, each saying so. After every step ``check.md`` is written and the whole of
``$GF_OUT`` is packed into ``$GF_RETURN/gpu_first.tgz`` beside a copy of ``check.md`` (what the device
brings back: at most 8 files, so never the step files themselves).

**A step takes all its processes with it.** The step runs as the leader of its own session; what it
starts through :func:`run` (probes, the reference run, the allocator model) gets a process group of
its own inside that session, and their children (a probe's isolated cells, its workers) stay in that
group. The runner is a child subreaper, so a process that left the session (``setsid``) and was
orphaned comes back to it as a child. When the step ends, however it ends, every process of its
session and every descendant of the runner is ended (SIGTERM, then SIGKILL), and the step's JSON says
how many were left. Inside a step every timeout is cut to ``$GF_STEP_DEADLINE`` (the step's own
timeout less a reserve the step keeps to write its record), so an inner kill comes first and the
step still records what it found.

In a step: ``step = Step("meter")``, ``step.probe(label, *args)`` runs the built-in ga_memory probe
as the orchestrator does (``$BISECTOR_RESULT``, ``$BISECTOR_DEVICE``) and keeps its result in
``$GF_OUT/results`` (on a GPU it also checks that the probe measured with the CUDA meter on a CUDA
device), ``step.check(name, verdict)`` records a :mod:`verdicts` result, and ``step.cuda`` says
whether this run is on a GPU (``DEV=cpu`` is the dry run: CUDA-only checks SKIP).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROBE = os.path.join(ROOT, "probes", "ga_memory", "__main__.py")
MIN_LEFT_S = 5        # a step is not started with less than this left of the budget
KILL_GRACE_S = 5      # SIGTERM, then this long, then SIGKILL (the runner ending a step)
INNER_GRACE_S = 2     # the same inside a step (a probe ends on SIGTERM at once)
STEP_RESERVE_S = 10   # of a step's timeout, kept for the step to record what it found after an inner kill
RESERVE_SHARE = 0.2   # ... at most this share of a short timeout
BUNDLE_NAME = "gpu_first.tgz"
PR_SET_CHILD_SUBREAPER = 36
INNER_TIMEOUT = -9    # run()'s exit code after a timeout (its whole group killed)
NOT_STARTED = -15     # run()'s exit code when the step's deadline left no time to start


def out_dir() -> str:
    """Where the steps write (the work directory; run.sh: $WORK)."""
    return os.environ.get("GF_OUT") or os.path.join(os.getcwd(), "gpu-first")


def return_dir():
    """Where what comes back goes (the bundle and check.md; run.sh: $OUT), or None."""
    return os.environ.get("GF_RETURN") or None


def dev() -> str:
    return os.environ.get("GF_DEV", "cuda")


def _write(path: str, data: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=False)
    os.replace(tmp, path)


def read_json(path: str):
    """The JSON in ``path``, or None where there is none (or it is not JSON)."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def load(name: str):
    """A step's JSON as written so far, or None."""
    return read_json(os.path.join(out_dir(), f"{name}.json"))


def result(step: str, label: str):
    """The probe result an earlier step kept (``results/<step>.<label>.json``), or None."""
    return read_json(os.path.join(out_dir(), "results", f"{step}.{label}.json"))


def step_left():
    """Seconds left before the step's inner deadline (``$GF_STEP_DEADLINE``), or None outside a runner."""
    deadline = os.environ.get("GF_STEP_DEADLINE")
    return None if not deadline else float(deadline) - time.time()


class Step:
    """One step's record: its checks (PASS / FAIL / SKIP), tables and facts, saved as they come."""

    def __init__(self, name: str):
        self.name, self.dev, self.start = name, dev(), time.time()
        self.cuda = self.dev == "cuda"
        self.data = {"step": name, "dev": self.dev, "status": "running", "checks": [], "tables": {}, "facts": {},
                     "results": []}
        os.makedirs(os.path.join(out_dir(), "results"), exist_ok=True)
        self.save()

    def save(self) -> None:
        self.data["seconds"] = round(time.time() - self.start, 1)
        _write(os.path.join(out_dir(), f"{self.name}.json"), self.data)

    def check(self, name: str, verdict) -> bool:
        """Record ``verdict`` = (result, detail), result PASS / FAIL / SKIP; True when it passed."""
        result, detail = verdict
        self.data["checks"].append({"check": name, "result": result, "detail": str(detail)[:1500]})
        print(f"[{result}] {self.name}: {name}: {detail}", flush=True)
        self.save()
        return result == "PASS"

    def cuda_only(self, name: str, verdict_fn) -> bool:
        """A check that needs a GPU: SKIP in the dry run, else ``verdict_fn()``."""
        if not self.cuda:
            return self.check(name, ("SKIP", "needs CUDA (DEV=cpu dry run)"))
        return self.check(name, verdict_fn())

    def fact(self, key: str, value) -> None:
        self.data["facts"][key] = value
        self.save()

    def table(self, name: str, header: list, rows: list) -> None:
        self.data["tables"][name] = {"header": header, "rows": rows}
        self.save()

    def run(self, label: str, cmd: list, env: dict, timeout: float) -> int:
        """``cmd`` under :func:`run` (its output in this step's log); its exit code and seconds kept
        as facts (``NOT_STARTED`` / ``INNER_TIMEOUT`` said in words)."""
        code, seconds = run(cmd, env, timeout)
        said = {NOT_STARTED: "not started: the step's deadline", INNER_TIMEOUT: "killed at its timeout"}
        self.data["facts"].setdefault("commands", {})[label] = {"exit": said.get(code, code),
                                                                "seconds": round(seconds, 1)}
        self.save()
        return code

    def probe(self, label: str, *args, timeout: float = 300):
        """Run the ga_memory probe; (exit code, result dict or None). Its result stays in
        ``results/<step>.<label>.json`` (written by the probe after every cell, so a kill keeps the
        finished ones), its output goes to this step's log. On a GPU the result must say meter
        ``cuda`` and a device of type ``cuda`` (a check of its own)."""
        import verdicts

        path = os.path.join(out_dir(), "results", f"{self.name}.{label}.json")
        if os.path.exists(path):
            os.remove(path)
        env = {**os.environ, "BISECTOR_RESULT": path, "BISECTOR_DEVICE": self.dev, "PYTHONUNBUFFERED": "1"}
        code = self.run(f"probe {label}", [sys.executable, PROBE, *args], env, timeout)
        seconds = self.data["facts"]["commands"][f"probe {label}"]["seconds"]
        print(f"[probe] {label}: exit {code} in {seconds:.1f}s: {' '.join(args)}", flush=True)
        result = read_json(path)
        if result is not None:
            self.data["results"].append(os.path.relpath(path, out_dir()))
        self.data["facts"].setdefault("probe_seconds", {})[label] = seconds
        self.save()
        if self.cuda:
            self.check(f"{label}: measured with the CUDA meter on a CUDA device", verdicts.on_cuda(result))
        return code, result

    def done(self) -> int:
        self.data["status"] = "done"
        self.save()
        return 0


def widths(step: "Step", *sizes: int) -> list:
    """Probe arguments for small models: on a GPU the ``cuda`` profile (4 layers, 8192 tokens of
    vocabulary) at ``sizes``, in the dry run the default tiny models at a sixteenth of the width."""
    if step.cuda:
        return ["--profile", "cuda", "--sizes", ",".join(str(s) for s in sizes)]
    return ["--sizes", ",".join(str(s // 16) for s in sizes)]


def planned_steps() -> list:
    """The runner's steps in order, as run.sh lists them: [(name, planned GPU seconds, cap seconds)]."""
    steps = []
    with open(os.path.join(HERE, "run.sh")) as fh:
        for line in fh:
            words = line.split("#", 1)[0].split()
            if len(words) == 4 and words[0] == "step":
                steps.append((words[1], float(words[2]), float(words[3])))
    return steps


def reserve_s(timeout: float) -> float:
    """What of a step's ``timeout`` the step keeps to record what it found after an inner kill."""
    return min(STEP_RESERVE_S, RESERVE_SHARE * timeout)


# --- processes ---------------------------------------------------------------------------------
def _table() -> dict:
    """{pid: (ppid, pgid, sid, state)} of every process (Linux /proc; {} elsewhere)."""
    procs = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return procs
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        procs[int(name)] = (int(fields[1]), int(fields[2]), int(fields[3]), fields[0])
    return procs


def descendants(root: int, procs=None) -> set:
    """Every live process below ``root`` (children, theirs, ...), zombies left out."""
    procs = _table() if procs is None else procs
    below, todo = set(), [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, _, _, state) in procs.items():
            if ppid == parent and pid not in below:
                below.add(pid)
                todo.append(pid)
    return {p for p in below if procs[p][3] != "Z"}


def _members(sid=None, pgid=None, root=None) -> set:
    """Live processes of session ``sid`` or group ``pgid``, or below ``root``, never this one."""
    procs = _table()
    found = {pid for pid, (_, g, s, state) in procs.items()
             if state != "Z" and ((sid is not None and s == sid) or (pgid is not None and g == pgid))}
    if root is not None:
        found |= descendants(root, procs)
    found.discard(os.getpid())
    return found


def _signal(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _reap() -> None:
    """Collect our exited children (orphans that came to this subreaper among them)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _alive(pids) -> set:
    procs = _table()
    return {p for p in pids if p in procs and procs[p][3] != "Z"}


def end_all(find, grace: float, reap=_reap) -> int:
    """End every process ``find()`` names: SIGTERM, up to ``grace`` s for them to go, then SIGKILL
    until none is left (``reap`` collects the exited ones that are ours); how many there were."""
    first = find()
    if not first:
        return 0
    _signal(first, signal.SIGTERM)
    until = time.monotonic() + grace
    while time.monotonic() < until:
        reap()
        if not find():
            return len(first)
        time.sleep(0.05)
    for _ in range(200):
        left = find()
        if not left:
            break
        _signal(left, signal.SIGKILL)
        time.sleep(0.05)
        reap()
    return len(first)


def _become_subreaper() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception:  # noqa: BLE001 - not Linux: the session sweep still runs
        pass


def run(cmd: list, env: dict, timeout: float) -> tuple:
    """Run ``cmd`` in a process group of its own inside this step's session, its output on ours;
    (exit code, seconds). The timeout is cut to the step's deadline; after it the group and every
    process below ``cmd`` end and the code is ``INNER_TIMEOUT``; ``NOT_STARTED`` when the deadline
    left no time at all."""
    left = step_left()
    if left is not None:
        timeout = min(timeout, left)
    if timeout < 1.0:
        print(f"[run] not started, the step's deadline is {timeout:.1f} s away: {' '.join(cmd)[:200]}", flush=True)
        return NOT_STARTED, 0.0
    start = time.time()
    group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
    proc = subprocess.Popen(cmd, env=env, **group)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        below = descendants(proc.pid) | {proc.pid}   # also those that left its group
        end_all(lambda: _members(pgid=proc.pid, root=proc.pid) | _alive(below), INNER_GRACE_S,
                reap=lambda: proc.poll())
        proc.wait()
        code = INNER_TIMEOUT
    return code, time.time() - start


# --- the runner ---------------------------------------------------------------------------------
def left_s() -> float:
    """Seconds left of the run's budget."""
    start = float(os.environ.get("GF_START") or time.time())
    return float(os.environ.get("GF_BUDGET", "520")) - (time.time() - start)


def _finish_record(name: str, planned: float, status: str, result: str, detail: str, seconds: float,
                   leftovers: int = 0) -> None:
    """Give a step that did not finish (or never ran) its status and a check that says so."""
    data = load(name) or {"step": name, "dev": dev(), "checks": [], "tables": {}, "facts": {}, "results": []}
    data.update(status=status, planned_s=planned, seconds=round(seconds, 1), leftover_processes=leftovers)
    data["checks"].append({"check": "the step finished", "result": result, "detail": detail})
    _write(os.path.join(out_dir(), f"{name}.json"), data)


def run_step(name: str, planned: float, cap: float) -> int:
    """The runner's verb for one step (see the module docstring)."""
    os.makedirs(out_dir(), exist_ok=True)
    left = left_s()
    if left < MIN_LEFT_S:
        why = f"skipped: the run's budget of {os.environ.get('GF_BUDGET', '520')} s is spent"
        print(f"[SKIP] {name}: {why}", flush=True)
        _finish_record(name, planned, "skipped", "SKIP", why, 0.0)
        bundle()
        return 0
    timeout = min(cap, left)
    _become_subreaper()
    log = os.path.join(out_dir(), f"{name}.log")
    print(f"[step] {name}: planned {planned:g} s on a GPU, timeout {timeout:.0f} s", flush=True)
    start = time.time()
    env = {**os.environ, "GF_STEP_DEADLINE": f"{start + timeout - reserve_s(timeout):.3f}"}
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, f"{name}.py")], stdout=fh, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        # however it ended: its session (the step, its probes' groups) and whatever came to us
        leftovers = end_all(lambda: _members(sid=proc.pid, root=os.getpid()), KILL_GRACE_S)
        proc.wait()
    seconds = time.time() - start
    data = load(name)
    if code is None:
        _finish_record(name, planned, "timeout", "INCOMPLETE", f"ran out of time: killed after {timeout:.0f} s "
                       f"(its timeout), with {leftovers} process(es) of its session", seconds, leftovers)
    elif code != 0 or not data or data.get("status") != "done":
        _finish_record(name, planned, "crashed", "FAIL", f"exited {code}: see {name}.log", seconds, leftovers)
    else:
        data.update(planned_s=planned, leftover_processes=leftovers)
        if leftovers:
            data["checks"].append({"check": "the step left no process running", "result": "FAIL",
                                   "detail": f"{leftovers} process(es) still ran after it ended (killed)"})
        _write(os.path.join(out_dir(), f"{name}.json"), data)
    with open(log) as fh:
        sys.stdout.write("".join(line for line in fh if line.startswith("[")))
    bundle()
    return 0


def bundle() -> None:
    """check.md from what the steps wrote so far, and, with ``$GF_RETURN`` set, the whole work
    directory as one ``gpu_first.tgz`` there with a copy of check.md beside it (a machine that
    returns only a few files still returns everything, even after a kill)."""
    import report

    report.write(out_dir())
    target = return_dir()
    if not target:
        return
    import shutil
    import tarfile

    os.makedirs(target, exist_ok=True)
    archive = os.path.join(target, BUNDLE_NAME)
    tmp = f"{archive}.tmp{os.getpid()}"
    own = os.path.realpath(target)
    with tarfile.open(tmp, "w:gz") as tar:  # never the bundle itself, should the work directory hold it
        tar.add(out_dir(), arcname="gpu-first",
                filter=lambda info: None if BUNDLE_NAME in os.path.basename(info.name) else info)
    os.replace(tmp, archive)
    if os.path.realpath(out_dir()) != own:
        shutil.copyfile(os.path.join(out_dir(), "check.md"), os.path.join(target, "check.md.tmp"))
        os.replace(os.path.join(target, "check.md.tmp"), os.path.join(target, "check.md"))


def main(argv: list) -> int:
    if argv[:1] == ["step"] and len(argv) == 4:
        return run_step(argv[1], float(argv[2]), float(argv[3]))
    print("usage: gf.py step NAME PLANNED_S CAP_S (the report: report.py)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main(sys.argv[1:]))
