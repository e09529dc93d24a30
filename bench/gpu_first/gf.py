"""bench/gpu_first's runner and the library its steps share (standard library only).

``python3 gf.py step NAME PLANNED CAP`` runs step ``NAME.py`` (beside this file) under the run's
budget: its own timeout is CAP seconds or what is left of ``$GF_BUDGET`` (counted from
``$GF_START``), whichever is less, and with nothing left the step is skipped and said so. The step's
output goes to ``$GF_OUT/NAME.log``; the step itself writes ``$GF_OUT/NAME.json`` (after every
check, so a kill leaves what it found); a step that timed out or crashed gets a failed check saying
so. ``python3 report.py`` writes ``$GF_OUT/check.md`` from the step files and bundles them.

In a step: ``step = Step("meter")``, ``step.probe(label, *args)`` runs the built-in ga_memory probe
as the orchestrator does (``$BISECTOR_RESULT``, ``$BISECTOR_DEVICE``) and keeps its result in
``$GF_OUT/results``, ``step.check(name, verdict)`` records a :mod:`verdicts` result, and
``step.cuda`` says whether this run is on a GPU (``DEV=cpu`` is the dry run: CUDA-only checks SKIP).
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
KILL_GRACE_S = 5


def out_dir() -> str:
    return os.environ.get("GF_OUT") or os.path.join(os.getcwd(), "gpu-first")


def dev() -> str:
    return os.environ.get("GF_DEV", "cuda")


def _write(path: str, data: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=False)
    os.replace(tmp, path)


def read_json(path: str):
    """The JSON in ``path``, or None where there is none."""
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return json.load(fh)


def load(name: str):
    """A step's JSON as written so far, or None."""
    return read_json(os.path.join(out_dir(), f"{name}.json"))


def result(step: str, label: str):
    """The probe result an earlier step kept (``results/<step>.<label>.json``), or None."""
    return read_json(os.path.join(out_dir(), "results", f"{step}.{label}.json"))


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

    def probe(self, label: str, *args, timeout: float = 300):
        """Run the ga_memory probe; (exit code, result dict or None). Its result stays in
        ``results/<step>.<label>.json``, its output goes to this step's log."""
        path = os.path.join(out_dir(), "results", f"{self.name}.{label}.json")
        if os.path.exists(path):
            os.remove(path)
        env = {**os.environ, "BISECTOR_RESULT": path, "BISECTOR_DEVICE": self.dev, "PYTHONUNBUFFERED": "1"}
        code, seconds = run([sys.executable, PROBE, *args], env, timeout)
        print(f"[probe] {label}: exit {code} in {seconds:.1f}s: {' '.join(args)}", flush=True)
        result = read_json(path)
        if result is not None:
            self.data["results"].append(os.path.relpath(path, out_dir()))
        self.data["facts"].setdefault("probe_seconds", {})[label] = round(seconds, 1)
        self.save()
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


def run(cmd: list, env: dict, timeout: float) -> tuple:
    """Run ``cmd`` in its own process group, its output on ours; (exit code, seconds); -9 after a
    timeout (the whole group is killed)."""
    start = time.time()
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        code = proc.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        _kill(proc)
        code = -9
    return code, time.time() - start


def _kill(proc) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def left_s() -> float:
    """Seconds left of the run's budget."""
    start = float(os.environ.get("GF_START") or time.time())
    return float(os.environ.get("GF_BUDGET", "520")) - (time.time() - start)


def _finish_record(name: str, planned: float, status: str, detail: str, seconds: float) -> None:
    """Give a step that did not finish (or never ran) its status and a failed or skipped check."""
    data = load(name) or {"step": name, "dev": dev(), "checks": [], "tables": {}, "facts": {}, "results": []}
    data.update(status=status, planned_s=planned, seconds=round(seconds, 1))
    result = "SKIP" if status == "skipped" else "FAIL"
    data["checks"].append({"check": "the step finished", "result": result, "detail": detail})
    _write(os.path.join(out_dir(), f"{name}.json"), data)


def run_step(name: str, planned: float, cap: float) -> int:
    """The runner's verb for one step (see the module docstring)."""
    os.makedirs(out_dir(), exist_ok=True)
    left = left_s()
    if left < MIN_LEFT_S:
        why = f"skipped: the run's budget of {os.environ.get('GF_BUDGET', '520')} s is spent"
        print(f"[SKIP] {name}: {why}", flush=True)
        _finish_record(name, planned, "skipped", why, 0.0)
        return 0
    timeout = min(cap, left)
    log = os.path.join(out_dir(), f"{name}.log")
    print(f"[step] {name}: planned {planned:g} s on a GPU, timeout {timeout:.0f} s", flush=True)
    with open(log, "w") as fh:
        start = time.time()
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, f"{name}.py")], stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            code = None
    seconds = time.time() - start
    data = load(name)
    if code is None:
        _finish_record(name, planned, "timeout", f"killed after {timeout:.0f} s (its timeout)", seconds)
    elif code != 0 or not data or data.get("status") != "done":
        _finish_record(name, planned, "crashed", f"exited {code}: see {name}.log", seconds)
    else:
        data["planned_s"] = planned
        _write(os.path.join(out_dir(), f"{name}.json"), data)
    with open(log) as fh:
        sys.stdout.write("".join(line for line in fh if line.startswith("[")))
    bundle()
    return 0


def bundle() -> None:
    """With ``$GF_BUNDLE`` set: the whole output directory as one .tgz there, refreshed after every
    step (a machine that returns only a few files still returns everything, even after a kill)."""
    target = os.environ.get("GF_BUNDLE")
    if not target:
        return
    import tarfile

    tmp, own = f"{target}.tmp{os.getpid()}", os.path.basename(target)
    with tarfile.open(tmp, "w:gz") as tar:  # never itself, should it lie inside OUT
        tar.add(out_dir(), arcname=os.path.basename(out_dir().rstrip("/")) or "gpu-first",
                filter=lambda info: None if os.path.basename(info.name).startswith(own) else info)
    os.replace(tmp, target)


def main(argv: list) -> int:
    if argv[:1] == ["step"] and len(argv) == 4:
        return run_step(argv[1], float(argv[2]), float(argv[3]))
    print("usage: gf.py step NAME PLANNED_S CAP_S (the report: report.py)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main(sys.argv[1:]))
