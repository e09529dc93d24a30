"""Built-in probe ``command``: a user's own program, run unchanged, measured per optimizer step.

    python probes/command/__main__.py [--measure-skip N] [--meter tensors|rss] -- CMD [ARGS...]

CMD runs as given (its own stdin, stdout and stderr; in this process's group, so whatever stops this
probe stops it too) with a generated ``sitecustomize`` first on ``PYTHONPATH``. That loads the in-process
meter (``_inprocess.py``) into every Python process of the command, children and launcher-started ranks
included, and then the environment's own ``sitecustomize`` if it has one. The meter waits for
``import torch``, then marks optimizer steps through torch's global optimizer hooks and records each
step (``_aggregate.py`` documents the metrics). ``--measure-skip N`` (default 1) leaves the first N steps
out as warm-up. The result (``command/1``) goes to ``$BISECTOR_RESULT`` (else ``--result``, else stdout)
when CMD exits 0; when it fails, this probe exits with CMD's code (or dies of its signal) and writes
nothing, so the caller classifies the failure from its stderr. A program this environment lacks (not in
its bin, not among its console scripts, not on PATH) exits 127 with a result naming it
(``missing_program``: the caller's environment failure, a SKIP). The meter changes nothing the program
computes or prints.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (_HERE, os.path.dirname(_HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from _aggregate import METRICS, read_records, summarize  # noqa: E402
from _probe_contract import cpu_name, write_result  # noqa: E402

NAME, VERSION, SCHEMA = "command", "1.0", "command/1"
SHIM = '''"""bisector's command meter (generated): the meter, then this environment's own sitecustomize."""
import importlib.machinery as _machinery
import importlib.util as _util
import os as _os
import sys as _sys

try:
    _spec = _util.spec_from_file_location("_bisector_meter", {meter!r})
    _meter = _util.module_from_spec(_spec)
    _sys.modules["_bisector_meter"] = _meter
    _spec.loader.exec_module(_meter)
    _meter.install()
except Exception as _exc:  # the program runs as it would without the meter; its records say why
    _records = _os.environ.get("BISECTOR_METER_RECORDS")
    if _records:
        with open(_os.path.join(_records, "%d.error" % _os.getpid()), "w") as _fh:
            _fh.write("%s: %s" % (type(_exc).__name__, _exc))

_here = _os.path.dirname(_os.path.abspath(__file__))
_rest = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
_next = _machinery.PathFinder.find_spec("sitecustomize", _rest)
if _next is not None and _next.loader is not None:
    _module = _util.module_from_spec(_next)
    _sys.modules["sitecustomize"] = _module
    _next.loader.exec_module(_module)
'''


def parse(argv):
    if "--" not in argv:
        raise SystemExit("command: usage: command [--measure-skip N] [--meter tensors|rss] -- CMD [ARGS...]")
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="command", description=__doc__.splitlines()[0])
    p.add_argument("--measure-skip", type=int, default=1, help="optimizer steps left out as warm-up")
    p.add_argument("--meter", choices=["tensors", "rss"], default="tensors",
                   help="tensors: exact live tensor bytes on the CPU (and RSS, time); rss: RSS and time only")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                   help="which memory to meter (default: $BISECTOR_DEVICE, else CUDA where torch sees a GPU)")
    p.add_argument("--result", help="where to write when BISECTOR_RESULT is unset (else stdout)")
    p.add_argument("--keep-records", help="copy the per-process records to this directory")
    args = p.parse_args(argv[:cut])
    args.command = argv[cut + 1:]
    if not args.command:
        p.error("no command after --")
    if args.measure_skip < 0:
        p.error("--measure-skip must be >= 0")
    return args


def console_scripts(bin_dir):
    """Wrappers in ``bin_dir`` for the console scripts of this interpreter's packages that its own ``bin``
    lacks (torch shared from a base environment brings ``torchrun`` without putting it there): so
    ``torchrun`` is this environment's, never another interpreter's found further along ``PATH``."""
    from importlib.metadata import entry_points

    own = os.path.dirname(sys.executable)
    made = []
    for ep in entry_points(group="console_scripts"):
        if ep.name in made or "/" in ep.name or os.path.exists(os.path.join(own, ep.name)):
            continue
        module, _, attr = ep.value.partition(":")
        call = f"import sys; from {module.strip()} import {attr.split('.')[0].strip()} as main; sys.exit(main())"
        if attr.strip() and "." not in attr and module.replace(".", "").replace("_", "").isalnum():
            path = os.path.join(bin_dir, ep.name)
            with open(path, "w") as fh:
                fh.write(f"#!/bin/sh\nexec {_sh(sys.executable)} -c {_sh(call)} \"$@\"\n")
            os.chmod(path, 0o755)
            made.append(ep.name)
    return made


def _sh(word):
    return "'" + word.replace("'", "'\"'\"'") + "'"


def _command_env(args, shim_dir, records):
    env = dict(os.environ)
    env.pop("BISECTOR_RESULT", None)   # the program's own business is not this probe's result
    env["PYTHONPATH"] = shim_dir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    bin_dir = os.path.join(shim_dir, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    if console_scripts(bin_dir):   # after this environment's own bin, before anything else on PATH
        own = os.path.dirname(sys.executable)
        rest = [p for p in env.get("PATH", "").split(os.pathsep) if p and os.path.abspath(p) != own]
        env["PATH"] = os.pathsep.join([own, bin_dir, *rest])
    env["BISECTOR_METER_RECORDS"], env["BISECTOR_METER_KIND"] = records, args.meter
    if args.device:
        env["BISECTOR_METER_DEVICE"] = args.device
    return env


def run(args, records):
    """Run the command with the meter injected; (exit code, wall seconds, why it could not start or None)."""
    shim_dir = tempfile.mkdtemp(prefix="bisector-meter-")
    try:
        with open(os.path.join(shim_dir, "sitecustomize.py"), "w") as fh:
            fh.write(SHIM.format(meter=os.path.join(_HERE, "_inprocess.py")))
        start = time.perf_counter()
        try:
            child = subprocess.Popen(args.command, env=_command_env(args, shim_dir, records))
        except (FileNotFoundError, PermissionError) as exc:
            return 127, 0.0, _cannot_run(args.command[0], exc)
        # SIGTERM to this probe alone reaches the command too (Ctrl-C reaches the whole group by itself)
        previous = signal.signal(signal.SIGTERM, lambda s, _f: child.send_signal(s))
        try:
            code = child.wait()
        finally:
            signal.signal(signal.SIGTERM, previous)
        return code, time.perf_counter() - start, None
    finally:
        shutil.rmtree(shim_dir, ignore_errors=True)


def _cannot_run(program, exc):
    """Why the command's program did not start: not in this environment (its bin, its console scripts) nor
    on PATH, or not executable."""
    if isinstance(exc, PermissionError):
        return f"the command's program {program} is not executable ({exc.strerror})"
    if "/" in program:
        return f"the command's program {program} does not exist (from {os.getcwd()})"
    return (f"the command's program {program!r} is neither in this environment (its bin, its console scripts) nor "
            "on PATH: this candidate does not install it")


def result_of(args, records, wall):
    """The ``command/1`` result of a command that exited 0 (an error result when nothing was measured)."""
    procs = read_records(records)
    base = {"schema_version": SCHEMA, "probe": {"name": NAME, "version": VERSION}, "command": args.command,
            "measure_skip": args.measure_skip, "units": {k: unit for k, (unit, _) in METRICS.items()},
            "processes": len(procs)}
    load_errors = [open(os.path.join(records, n)).read()[:300] for n in sorted(os.listdir(records)) if n.endswith(".error")]
    if not procs:
        why = (f"the meter failed to load: {load_errors[0]}" if load_errors else
               "the meter loaded in no process of the command (python -I, -E or -S ignores PYTHONPATH; a command "
               "that runs no Python has nothing to measure)")
        return {**base, "metrics": {}, "error": why}
    with_torch = [p for p in procs.values() if p["torch"]]
    if not with_torch:
        return {**base, "metrics": {}, "error": f"no process of the command imported torch ({len(procs)} Python "
                                                 "process(es) ran): nothing to measure"}
    foreign = sorted({p["load"].get("prefix") for p in procs.values() if p["steps"] or p["torch"]} - {sys.prefix, None})
    if foreign:
        return {**base, "metrics": {}, "error": f"a process of the command ran another Python ({foreign[0]}), not "
                                                 f"this environment's ({sys.prefix}): a program on PATH outside the "
                                                 "environment (run it as python -m ...)"}
    metrics, facts = summarize(procs, args.measure_skip, wall)
    errors = [e for r in facts["ranks"] for e in r["errors"]]
    if errors:
        return {**base, "metrics": {}, "error": f"the meter failed inside the command: {errors[0]}", **facts}
    lead = next((p for p in procs.values() if p["steps"]), with_torch[0])
    torch = lead["torch"]
    device = {"type": torch.get("device"), "threads": torch.get("threads")}
    names = {s.get("cuda_device") for s in lead["steps"] if s.get("cuda_device")}
    device["name"] = names.pop() if len(names) == 1 else (cpu_name() if torch.get("device") == "cpu" else None)
    if torch.get("cuda_version"):
        device["cuda"] = torch["cuda_version"]
    steps = [{k: v for k, v in s.items() if k not in ("cuda_device",)} for s in lead["steps"]]
    return {**base, "metrics": metrics, "meter": torch.get("meter"), "device": device,
            "versions": {"torch": torch.get("version"), "torch_git": torch.get("git_version")},
            "rss_scope": torch.get("rss_scope"), "optimizer_hooks": torch.get("optimizer_hooks"),
            "steps": steps[:1000], **facts}


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    records = tempfile.mkdtemp(prefix="bisector-records-")
    try:
        code, wall, cannot = run(args, records)
        if args.keep_records:
            shutil.copytree(records, args.keep_records, dirs_exist_ok=True)
        if cannot:   # the environment lacks the program: an environment failure (SKIP), never a crash
            sys.stderr.write(f"command: {cannot}\n")
            write_result({"schema_version": SCHEMA, "probe": {"name": NAME, "version": VERSION}, "metrics": {},
                          "command": args.command, "error": cannot, "missing_program": args.command[0]}, args.result)
        elif code == 0:
            write_result(result_of(args, records, wall), args.result)
    finally:
        shutil.rmtree(records, ignore_errors=True)
    if code < 0:   # died of a signal: so does this probe, and the caller sees which
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main())
