"""acceptance/gpu_first's runner and the library its steps share (standard library only).

``python3 gf.py step NAME PLANNED CAP`` runs step ``NAME.py`` (beside this file) under the run's
budget: its own timeout is CAP seconds or what is left of ``$GF_BUDGET`` (counted from
``$GF_START``), whichever is less, and with nothing left the step is skipped and said so. The step's
output goes to ``$GF_OUT/NAME.log``; the step itself writes ``$GF_OUT/NAME.json`` (after every
check, so a kill leaves what it found); a step that ran out of time is INCOMPLETE, one that crashed
gets a failed check, each saying so. After every step ``check.md`` is written and the whole of
``$GF_OUT`` is packed into ``$GF_RETURN/gpu_first.tgz`` beside a copy of ``check.md`` (report.py;
what the device brings back: at most 8 files, so never the step files themselves).

**A step takes all its processes with it** (procs.py). The step runs as the leader of its own
session; what it starts through :func:`procs.run` (probes, the reference run, the allocator model)
gets a process group of its own inside that session, and their children (a probe's isolated cells,
its workers) stay in that group. The runner is a child subreaper, so a process that left the session
(``setsid``) and was orphaned comes back to it as a child; where the kernel refuses that (gVisor),
check.md says so in a WARN line. When the step ends, however it ends, every process of its session
and every descendant of the runner is ended (SIGTERM, then SIGKILL), and the step's JSON says how
many were left. Inside a step every timeout is cut to ``$GF_STEP_DEADLINE`` (the step's own timeout
less a reserve the step keeps to write its record), so an inner kill comes first and the step still
records what it found: a command cut so is ``INCOMPLETE``, never a failure (verdicts.py).

In a step: ``step = Step("meter")``, ``step.probe(label, *args)`` runs the built-in ga_memory probe
as the orchestrator does (``$BISECTOR_RESULT``, ``$BISECTOR_DEVICE``) and keeps its result in
``$GF_OUT/results`` (on a GPU it also checks that the probe measured with the CUDA meter on a CUDA
device), ``step.check(ID, verdict, **fields)`` records a :mod:`verdicts` result as the check
:mod:`checklist` lists under ID, and ``step.cuda`` says whether this run is on a GPU (``DEV=cpu`` is
the dry run: CUDA-only checks SKIP).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import checklist  # noqa: E402
import report  # noqa: E402
import verdicts  # noqa: E402
import verdicts_device  # noqa: E402
from layout import (BUNDLE_NAME, budget_s, dev, load, num, out_dir, planned_steps, read_json, result,  # noqa: E402,F401
                    return_dir, write_json)
from procs import become_subreaper, end_all, members, run, step_left  # noqa: E402,F401
from verdicts import INNER_TIMEOUT, NOT_STARTED  # noqa: E402,F401

ROOT = os.path.dirname(os.path.dirname(HERE))
PROBE = os.path.join(ROOT, "probes", "ga_memory", "__main__.py")
MIN_LEFT_S = 5        # a step is not started with less than this left of the budget
KILL_GRACE_S = 5      # SIGTERM, then this long, then SIGKILL (the runner ending a step)
STEP_RESERVE_S = 10   # of a step's timeout, kept for the step to record what it found after an inner kill
RESERVE_SHARE = 0.2   # ... at most this share of a short timeout
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)   # the runner sweeps its step's session on these


class Step:
    """One step's record: its checks (by id, :mod:`checklist`), tables and facts, saved as they come."""

    def __init__(self, name: str):
        self.name, self.dev, self.start = name, dev(), time.time()
        self.cuda = self.dev == "cuda"
        self.data = {"step": name, "dev": self.dev, "status": "running", "checks": [], "tables": {}, "facts": {},
                     "results": []}
        os.makedirs(os.path.join(out_dir(), "results"), exist_ok=True)
        self.save()

    def save(self) -> None:
        self.data["seconds"] = round(time.time() - self.start, 1)
        write_json(os.path.join(out_dir(), f"{self.name}.json"), self.data)

    def check(self, check_id: str, verdict, **fields) -> bool:
        """Record ``verdict`` = (result, detail) as check ``check_id`` (its name filled with ``fields``);
        True when it passed."""
        entry = checklist.record(check_id, *verdict, **fields)
        self.data["checks"].append(entry)
        print(f"[{entry['result']}] {self.name}: {entry['check']}: {entry['detail']}", flush=True)
        self.save()
        return entry["result"] == "PASS"

    def cuda_only(self, check_id: str, verdict_fn, **fields) -> bool:
        """A check that needs a GPU: SKIP in the dry run, else ``verdict_fn()``."""
        if not self.cuda:
            return self.check(check_id, ("SKIP", "needs CUDA (DEV=cpu dry run)"), **fields)
        return self.check(check_id, verdict_fn(), **fields)

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
        self.data["facts"].setdefault("commands", {})[label] = {
            "exit": verdicts.said(code) if verdicts.cut(code) else code, "seconds": round(seconds, 1)}
        self.save()
        return code

    def probe(self, label: str, *args, timeout: float = 300):
        """Run the ga_memory probe; (exit code, result dict or None). Its result stays in
        ``results/<step>.<label>.json`` (written by the probe after every cell, so a kill keeps the
        finished ones), its output goes to this step's log. On a GPU the result must say meter
        ``cuda`` and a device of type ``cuda`` (check ``probe.on_cuda``)."""
        path = os.path.join(out_dir(), "results", f"{self.name}.{label}.json")
        if os.path.exists(path):
            os.remove(path)
        env = {**os.environ, "BISECTOR_RESULT": path, "BISECTOR_DEVICE": self.dev, "PYTHONUNBUFFERED": "1"}
        code = self.run(f"probe {label}", [sys.executable, PROBE, *args], env, timeout)
        seconds = self.data["facts"]["commands"][f"probe {label}"]["seconds"]
        print(f"[probe] {label}: {verdicts.said(code)} in {seconds:.1f}s: {' '.join(args)}", flush=True)
        found = read_json(path)
        if found is not None:
            self.data["results"].append(os.path.relpath(path, out_dir()))
        self.data["facts"].setdefault("probe_seconds", {})[label] = seconds
        self.save()
        if self.cuda:
            self.check("probe.on_cuda", verdicts_device.on_cuda(found, code), label=label)
        return code, found

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


def reserve_s(timeout: float) -> float:
    """What of a step's ``timeout`` the step keeps to record what it found after an inner kill."""
    return min(STEP_RESERVE_S, RESERVE_SHARE * timeout)


# --- the runner ---------------------------------------------------------------------------------
def left_s() -> float:
    """Seconds left of the run's budget."""
    start = float(os.environ.get("GF_START") or time.time())
    return budget_s() - (time.time() - start)


def _finish_record(name: str, planned: float, status: str, outcome: str, detail: str, seconds: float,
                   leftovers: int = 0) -> dict:
    """Give a step that did not finish (or never ran) its status and a check that says so."""
    data = load(name) or {"step": name, "dev": dev(), "checks": [], "tables": {}, "facts": {}, "results": []}
    data.update(status=status, planned_s=planned, seconds=round(seconds, 1), leftover_processes=leftovers)
    data["checks"].append(checklist.record("run.finished", outcome, detail))
    return data


class Stopped(Exception):
    """The runner was signalled (SIGTERM, SIGINT, SIGHUP) while its step ran."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _stopped(signum, frame):
    raise Stopped(signum)


def _on_signals(handler) -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)


def run_step(name: str, planned: float, cap: float) -> int:
    """The runner's verb for one step (see the module docstring). A SIGTERM, SIGINT or SIGHUP to the runner
    (from run.sh, from the ``timeout`` it runs under, or sent to it) ends the step's session and whatever came
    back to it before the runner exits (128 + the signal): the step is recorded as interrupted, check.md and
    the bundle are written, and no process of the step goes on with parent 1."""
    os.makedirs(out_dir(), exist_ok=True)
    path = os.path.join(out_dir(), f"{name}.json")
    left = left_s()
    if left < MIN_LEFT_S:
        why = f"skipped: the run's budget of {budget_s():g} s is spent"
        print(f"[SKIP] {name}: {why}", flush=True)
        write_json(path, _finish_record(name, planned, "skipped", "SKIP", why, 0.0))
        report.bundle()
        return 0
    timeout = min(cap, left)
    warning = become_subreaper()
    log = os.path.join(out_dir(), f"{name}.log")
    print(f"[step] {name}: planned {planned:g} s on a GPU, timeout {timeout:.0f} s", flush=True)
    start = time.time()
    env = {**os.environ, "GF_STEP_DEADLINE": f"{start + timeout - reserve_s(timeout):.3f}"}
    proc, stopped = None, None
    with open(log, "w") as fh:
        try:
            _on_signals(_stopped)
            proc = subprocess.Popen([sys.executable, os.path.join(HERE, f"{name}.py")], stdout=fh,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        except Stopped as exc:
            code, stopped = None, exc.signum
        _on_signals(signal.SIG_IGN)   # (a second signal, run.sh passing the first on, does not cut the sweep short)
        # however it ended: its session (the step, its probes' groups) and whatever came to us
        leftovers = end_all(lambda: members(sid=proc.pid if proc else None, root=os.getpid()), KILL_GRACE_S)
        if proc is not None:
            proc.wait()
    seconds = time.time() - start
    data = load(name)
    if stopped is not None:
        data = _finish_record(name, planned, "interrupted", "INCOMPLETE",
                              f"stopped by {signal.Signals(stopped).name} after {seconds:.0f} s: its session "
                              f"ended with {leftovers} process(es)", seconds, leftovers)
    elif code is None:
        data = _finish_record(name, planned, "timeout", "INCOMPLETE", f"ran out of time: killed after {timeout:.0f} s "
                              f"(its timeout), with {leftovers} process(es) of its session", seconds, leftovers)
    elif code != 0 or not data or data.get("status") != "done":
        data = _finish_record(name, planned, "crashed", "FAIL", f"exited {code}: see {name}.log", seconds, leftovers)
    else:
        data.update(planned_s=planned, leftover_processes=leftovers)
        if leftovers:
            data["checks"].append(checklist.record("run.no_leftovers", "FAIL",
                                                   f"{leftovers} process(es) still ran after it ended (killed)"))
    if warning:
        data.setdefault("warnings", []).append(checklist.record("run.subreaper", "WARN", warning))
    write_json(path, data)
    with open(log) as fh:
        sys.stdout.write("".join(line for line in fh if line.startswith("[")))
    report.bundle()
    return 128 + stopped if stopped is not None else 0


def main(argv: list) -> int:
    if argv[:1] == ["step"] and len(argv) == 4:
        return run_step(argv[1], float(argv[2]), float(argv[3]))
    print("usage: gf.py step NAME PLANNED_S CAP_S (the report: report.py)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
