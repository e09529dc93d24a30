"""Run a probe in a candidate environment and classify how it ended (never a verdict by itself)."""
from __future__ import annotations

import json
import re
import signal
import tempfile
from pathlib import Path
from typing import Callable, Optional

from pydantic import ValidationError

from bisector.core.measurement import Status
from bisector.core.facts import RESULT_ENV, RESULT_MAX_BYTES, ProbeResult
from bisector.job.probe import Probe
from bisector.measure.program_output import kept
from bisector.measure.warm_pool import Launch
from bisector.process.procs import Completed, run_bounded

NO_RESULT = ("probe exited 0 without writing a result: a probe writes {\"metrics\": {NAME: NUMBER}} to "
             "$BISECTOR_RESULT; or give your program after -- (bisector run ... -- python train.py) and it is "
             "measured for you, per optimizer step")
_OOM = re.compile(r"OutOfMemoryError|CUDA out of memory|out of memory|Cannot allocate memory|MemoryError")
_NOT_OOM_KILLER = "not by the out-of-memory killer"   # the command probe's words when the cgroup's count stayed
_IMPORT = re.compile(r"^(ModuleNotFoundError|ImportError)\b", re.M)
# runs the probe (spec, python, env, cwd, on_line) in a warm worker's child where it can: bisector.measure.warm_pool
WarmRun = Callable[[Probe, Path, dict, Path, Optional[Callable[[str], None]]], Launch]


class ProbeOutcome:
    """What one probe run produced: a status, metrics when it succeeded, a reason otherwise."""

    def __init__(self, status: Status, seconds: float, metrics: Optional[dict[str, float]] = None,
                 reason: Optional[str] = None, exit_code: Optional[int] = None,
                 result: Optional[ProbeResult] = None, stderr_tail: str = ""):
        self.status = status
        self.seconds = seconds
        self.metrics = metrics or {}
        self.reason = reason
        self.exit_code = exit_code
        self.result = result
        self.stderr_tail = stderr_tail
        self.launch: Optional[dict] = None  # how it was launched (a warm worker's fork, or why not), when known
        self.output: dict[str, list[str]] = {}   # the last lines of each stream it printed (program_output.kept)

    def wrong_device(self, why: str) -> "ProbeOutcome":
        """The same run, turned into a SKIP-class measurement (its metrics dropped, its result kept)."""
        return ProbeOutcome(Status.WRONG_DEVICE, self.seconds, reason=why, exit_code=self.exit_code,
                            result=self.result, stderr_tail=self.stderr_tail)

    def details(self) -> dict:
        """What is stored next to the metrics and the result: the stderr tail, how it was launched."""
        data = {"stderr_tail": self.stderr_tail[-4000:]}
        if self.output:
            data["output"] = self.output
        if self.launch:
            data["launch"] = self.launch
        return data


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _failure(done: Completed) -> tuple[Status, str]:
    """Classify a probe that did not finish cleanly."""
    if done.timed_out:
        return Status.TIMEOUT, f"probe timed out after {done.seconds:.0f}s"
    tail = done.stderr_tail + done.stdout_tail
    if done.returncode < 0:
        return _killed(-done.returncode, _last_line(done.stderr_tail))
    if _OOM.search(tail):
        last = _last_line(done.stderr_tail)
        return Status.OOM, last if last.startswith("out of memory") else f"out of memory: {last}"
    if _IMPORT.search(done.stderr_tail):
        return Status.IMPORT_FAILED, _last_line(done.stderr_tail)
    return Status.CRASHED, f"probe exited {done.returncode}: {_last_line(done.stderr_tail) or 'no message'}"


def _killed(sig: int, said: str) -> tuple[Status, str]:
    """A probe that died of a signal (the command meter dies of its program's). SIGKILL is how the kernel's
    out-of-memory killer ends a process: out of memory (``--oom-is-bad`` applies), said as a fact only where the
    probe saw its cgroup's OOM-kill count rise, "likely" where nothing could tell, and not at all where the
    count stayed (the probe's last stderr line says which: ``killed (SIGKILL)...``)."""
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = "an unknown signal"
    if sig != signal.SIGKILL:
        return Status.CRASHED, f"probe killed by signal {sig} ({name})"
    if said.startswith("killed (SIGKILL)"):
        return (Status.CRASHED if _NOT_OOM_KILLER in said else Status.OOM), said
    return Status.OOM, "killed (SIGKILL), likely out of memory"


def _read_result(path: Path, done: Completed) -> ProbeOutcome:
    if path.is_symlink() or (path.exists() and not path.is_file()):   # a directory, a FIFO, a link: no result
        return ProbeOutcome(Status.BAD_OUTPUT, done.seconds, exit_code=done.returncode, stderr_tail=done.stderr_tail,
                            reason="invalid probe result: $BISECTOR_RESULT is not a regular file (the probe "
                                   "replaced it)")
    if not path.exists() or path.stat().st_size == 0:
        return ProbeOutcome(Status.BAD_OUTPUT, done.seconds, reason=NO_RESULT,
                            exit_code=done.returncode, stderr_tail=done.stderr_tail)
    size = path.stat().st_size
    if size > RESULT_MAX_BYTES:   # it would be stored with every measurement: refused, never truncated
        return ProbeOutcome(Status.BAD_OUTPUT, done.seconds, exit_code=done.returncode, stderr_tail=done.stderr_tail,
                            reason=f"the probe's result is {size / 2**20:.1f} MiB, over the {RESULT_MAX_BYTES >> 20} "
                                   "MiB bisector reads: write metrics and small facts to $BISECTOR_RESULT, bulky data "
                                   "to a file of the probe's own")
    try:
        result = ProbeResult.read(json.loads(path.read_text()))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "result"
        first = f"{where}: {err['msg'].removeprefix('Value error, ')}"[:200]
        return ProbeOutcome(Status.BAD_OUTPUT, done.seconds, reason=f"invalid probe result: {first}",
                            exit_code=done.returncode, stderr_tail=done.stderr_tail)
    except RecursionError:   # JSON nested thousands deep: no probe result is
        return ProbeOutcome(Status.BAD_OUTPUT, done.seconds, reason="invalid probe result: nested too deeply",
                            exit_code=done.returncode, stderr_tail=done.stderr_tail)
    except (ValueError, OSError) as exc:   # not JSON, not UTF-8, unreadable
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        return ProbeOutcome(Status.BAD_OUTPUT, done.seconds, reason=f"invalid probe result: {first}",
                            exit_code=done.returncode, stderr_tail=done.stderr_tail)
    if result.error and result.missing_program:   # the environment lacks a program the probe must run
        return ProbeOutcome(Status.ENV_FAILED, done.seconds, reason=result.error[:300], exit_code=done.returncode,
                            result=result, stderr_tail=done.stderr_tail)
    if done.returncode != 0 or (not result.metrics and result.error):
        status = Status.OOM if result.error and _OOM.search(result.error) else Status.CRASHED
        why = f"probe error: {result.error[:300]}" if result.error else f"probe exited {done.returncode}"
        return ProbeOutcome(status, done.seconds, reason=why, exit_code=done.returncode, result=result,
                            stderr_tail=done.stderr_tail)
    return ProbeOutcome(Status.OK, done.seconds, metrics=result.metrics, exit_code=done.returncode,
                        result=result, stderr_tail=done.stderr_tail)


def run_probe(spec: Probe, python: Path, env: dict[str, str], workdir: Optional[Path] = None,
              on_line: Optional[Callable[[str], None]] = None, warm: Optional[WarmRun] = None,
              on_output: Optional[Callable[[str, str], None]] = None) -> ProbeOutcome:
    """Run the probe with ``python`` (the candidate env's interpreter) and the env's variables: in a warm
    worker's child where ``warm`` can, else under the launcher (nothing it starts outlives it, nor
    bisector); ``on_line`` sees its stderr lines as they come (live progress), ``on_output`` every line of
    both streams (``-v``); the last lines of each are kept with the outcome. A command that is not in
    the environment or on its PATH is an environment failure."""
    with tempfile.TemporaryDirectory(prefix="bisector-probe-") as tmp:
        result_path = Path(tmp) / "result.json"
        run_env = {**env, RESULT_ENV: str(result_path)}
        argv = spec.argv(python)
        workdir = workdir or spec.workdir
        launch = warm(spec, python, run_env, workdir or Path(tmp), on_line) if warm else None
        done = launch.done if launch is not None else None
        if done is None:
            try:
                done = run_bounded(argv, run_env, cwd=workdir or Path(tmp), timeout=spec.timeout, on_line=on_line,
                                   supervise=True, on_output=on_output)
            except FileNotFoundError:
                return ProbeOutcome(Status.ENV_FAILED, 0.0, reason=f"the probe command {argv[0]!r} is neither in "
                                    "the environment's bin nor on PATH")
        outcome = _outcome(spec, done, result_path)
        outcome.launch = launch.details if launch is not None else None
        outcome.output = kept(done)
        return outcome


def _outcome(spec: Probe, done: Completed, result_path: Path) -> ProbeOutcome:
    if spec.judged_by_exit_code and not done.timed_out:
        return ProbeOutcome(Status.EXIT_CODE, done.seconds, exit_code=done.returncode,
                            reason=_last_line(done.stderr_tail) or None, stderr_tail=done.stderr_tail)
    if done.timed_out or (done.returncode != 0 and not _has_result(result_path)):
        status, reason = _failure(done)
        return ProbeOutcome(status, done.seconds, reason=reason, exit_code=done.returncode,
                            stderr_tail=done.stderr_tail)
    return _read_result(result_path, done)


def _has_result(path: Path) -> bool:
    """A probe that exits non-zero may still have written a result saying why (its ``error``)."""
    return path.exists() and path.stat().st_size > 0
