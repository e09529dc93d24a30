"""Built-in probe ``command``: a user's own program, run unchanged, measured per optimizer step.

    python probes/command/__main__.py [--measure-skip N] [--meter tensors|rss] [--numerics on|off]
        [--update-norm-max MIB] [--site-min-bytes N] [--fake] -- CMD [ARGS...]

CMD runs as given (its own stdin, stdout and stderr; in this process's group, so whatever stops this
probe stops it too) with the meter injected into every Python process of it (``_launch.py``); the meter
(``_inprocess.py``) waits for torch, then marks optimizer steps through torch's global optimizer hooks and
records each step (``_records.py``: its bytes and time, and the numbers the program computed: ``_numerics.py``,
``--numerics off`` leaves them out); ``_aggregate.py`` turns the records into metrics. ``--measure-skip N``
(default 1) leaves the first N steps out as warm-up. The result (``command/1``) goes to ``$BISECTOR_RESULT``
(else ``--result``, else stdout) when CMD exits 0. When it fails, this probe writes nothing and exits with
CMD's code, or dies of CMD's signal; its last stderr line is then the failure's reason as the records tell
it (the first uncaught exception among the processes that are no launcher, a cgroup's OOM kill) for the
caller to read. A program this environment lacks (not in its bin, not among its console scripts, not on
PATH) exits 127 with a result naming it (``missing_program``: the caller's environment failure, a SKIP).
The meter changes nothing the program computes or prints. With ``--fake`` the program runs on fake tensors
(``_fake.py``); where fake mode stopped it at a read of a value, the steps it finished before are its result
(``fake_stopped`` says where), or, without any, an error result (``fake_refused``: ``_fake_stop.py``).
"""
import argparse
import os
import shutil
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (_HERE, os.path.dirname(_HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from _aggregate import METRICS, failure_line, read_processes, summarize  # noqa: E402
from _fake_stop import fake_cut, stopped  # noqa: E402
from _sites import peak_sites  # noqa: E402
from _launch import die_like, run, signal_line  # noqa: E402
from _probe_contract import cpu_name, write_result  # noqa: E402

NAME, VERSION, SCHEMA = "command", "1.2", "command/1"
NUMERICS_ENV, UPDATE_NORM_MAX_ENV = "BISECTOR_NUMERICS", "BISECTOR_UPDATE_NORM_MAX_MIB"   # read by _numerics.py


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
    p.add_argument("--numerics", choices=["on", "off"], default="on",
                   help="read each step's loss, gradient norm and update norm (_numerics.py; default on)")
    p.add_argument("--update-norm-max", type=float, metavar="MIB", default=None,
                   help="the most MiB of parameters copied to read update_norm (default 64; 0: never)")
    p.add_argument("--site-min-bytes", type=int, default=None, metavar="N",
                   help="storages of N bytes and more are placed at their allocation site (default 1 MiB); smaller "
                        "ones are pooled")
    p.add_argument("--fake", action="store_true",
                   help="run the program on fake tensors (torch's FakeTensorMode): nothing allocated, the step peak "
                        "the fake tensors' live bytes; a read of a tensor's value stops it (the result says where)")
    p.add_argument("--result", help="where to write when BISECTOR_RESULT is unset (else stdout)")
    p.add_argument("--keep-records", help="copy the per-process records to this directory")
    args = p.parse_args(argv[:cut])
    args.command = argv[cut + 1:]
    if not args.command:
        p.error("no command after --")
    if args.measure_skip < 0:
        p.error("--measure-skip must be >= 0")
    return args


def result_of(args, procs, records, wall, problems=(), cut=0):
    """The ``command/1`` result of a command that exited 0 (an error result when nothing was measured)."""
    base = {"schema_version": SCHEMA, "probe": {"name": NAME, "version": VERSION}, "command": args.command,
            "measure_skip": args.measure_skip, "units": {k: unit for k, (unit, _) in METRICS.items()},
            "processes": len(procs)}
    if problems:   # never summed: said
        base["records_rejected"] = list(problems)
    if cut:
        base["records_cut_short"] = cut
    if not procs:
        load_errors = [_read(os.path.join(records, n)) for n in sorted(os.listdir(records)) if n.endswith(".error")]
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
    lead = procs[facts["ranks"][0]["pid"]]
    torch = lead["torch"]
    device = {"type": torch.get("device"), "threads": torch.get("threads")}
    names = {s.get("cuda_device") for s in lead["steps"] if s.get("cuda_device")}
    device["name"] = names.pop() if len(names) == 1 else (cpu_name() if torch.get("device") == "cpu" else None)
    if torch.get("cuda_version"):
        device["cuda"] = torch["cuda_version"]
    steps = [{k: v for k, v in s.items() if k not in ("cuda_device", "sites")} for s in lead["steps"]]
    sites = peak_sites(procs, facts, metrics, args.measure_skip)
    return {**base, "metrics": metrics, "meter": torch.get("meter"), "device": device,
            "versions": {"torch": torch.get("version"), "torch_git": torch.get("git_version")},
            "rss_scope": torch.get("rss_scope"), "optimizer_hooks": torch.get("optimizer_hooks"),
            "steps": steps[:1000], **({"sites": sites} if sites else {}), **facts}


def _read(path):
    try:
        with open(path, errors="replace") as fh:
            return fh.read(300)
    except OSError:
        return "?"


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    os.environ[NUMERICS_ENV] = args.numerics   # the meter's settings for the program's numbers (_numerics.py)
    if args.update_norm_max is not None:
        os.environ[UPDATE_NORM_MAX_ENV] = f"{args.update_norm_max:g}"
    records, key = tempfile.mkdtemp(prefix="bisector-records-"), os.urandom(16)
    try:
        code, wall, cannot, kills = run(args, records, key)
        if args.keep_records:
            shutil.copytree(records, args.keep_records, dirs_exist_ok=True)
        if cannot:   # the environment lacks the program: an environment failure (SKIP), never a crash
            sys.stderr.write(f"command: {cannot}\n")
            write_result({"schema_version": SCHEMA, "probe": {"name": NAME, "version": VERSION}, "metrics": {},
                          "command": args.command, "error": cannot, "missing_program": args.command[0]}, args.result)
            return code
        procs, problems, cut = read_processes(records, key)
        refused = fake_cut(procs) if args.fake else None
        if refused:   # fake mode stopped the program at a value read: the steps before it, else no number
            result = stopped(result_of(args, procs, records, wall, problems, cut), refused)
            write_result(result, args.result)
            if result["metrics"]:
                return 0
        if code == 0:
            if not refused:
                write_result(result_of(args, procs, records, wall, problems, cut), args.result)
            return 0
        line = signal_line(-code, kills) if code < 0 else failure_line(procs, kills)
        if line:   # the last line of stderr: what the caller reads as the failure's reason
            sys.stderr.write(f"{line}\n")
    finally:
        shutil.rmtree(records, ignore_errors=True)
    if code < 0:   # died of a signal: so does this probe, and the caller sees which
        die_like(-code)
    return code


if __name__ == "__main__":
    sys.exit(main())
