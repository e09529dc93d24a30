"""A probe that opts in to the warm worker (stdlib only) and reports the state it starts in: its pid,
parent, process group and session, environment, arguments, working directory and stdin, and how many
runs its helper module has seen (always 1 in a fresh process image). Arguments (by hand, argparse
would be a module the worker imported for it): ``--exit=N``, ``--sleep=S``, ``--spawn=PIDFILE`` (a
grandchild sleeping a minute, its pid written there), ``--daemon=PIDFILE`` (the same, double-forked
into a session of its own), ``--atexit=FILE`` (written at exit), ``--print``,
``--raise``, ``--signal=N`` (kill itself), ``--interrupt`` (KeyboardInterrupt)."""
import atexit
import json
import os
import subprocess
import sys
import time

HELPER_IMPORTED_BEFORE = "_warm_state_helper" in sys.modules
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _warm_state_helper  # noqa: E402


def warm_imports():
    import _warm_state_helper  # noqa: F401


def main():
    args = dict(a.removeprefix("--").partition("=")[::2] for a in sys.argv[1:])
    _warm_state_helper.RUNS.append(os.getpid())
    if "atexit" in args:
        atexit.register(lambda: open(args["atexit"], "w").write(str(os.getpid())))
    if "print" in args:
        print("to stdout", flush=True)
        print("to stderr", file=sys.stderr, flush=True)
    stdin = os.fstat(0)
    state = {"pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
             "env": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd(), "runs_seen": len(_warm_state_helper.RUNS),
             "helper_imported_before": HELPER_IMPORTED_BEFORE,
             "stdin_is_null": (stdin.st_rdev, stdin.st_ino) == (os.stat(os.devnull).st_rdev, os.stat(os.devnull).st_ino),
             "name": __name__}
    with open(os.environ["BISECTOR_RESULT"], "w") as fh:
        json.dump({"metrics": {"runs_seen": float(state["runs_seen"])}, "state": state}, fh)
    if "spawn" in args:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open(args["spawn"], "w").write(str(child.pid))
    if "daemon" in args:
        code = ("import os, sys, time\nif os.fork():\n    os._exit(0)\nos.setsid()\n"
                "open(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
        subprocess.run([sys.executable, "-c", code, args["daemon"]], check=True)
        while not os.path.exists(args["daemon"]) or not open(args["daemon"]).read():
            time.sleep(0.01)
    if "sleep" in args:
        time.sleep(float(args["sleep"]))
    if "raise" in args:
        raise RuntimeError("the probe failed on purpose")
    if "interrupt" in args:
        raise KeyboardInterrupt
    if "signal" in args:
        os.kill(os.getpid(), int(args["signal"]))
    return int(args.get("exit", 0))


if __name__ == "__main__":
    sys.exit(main())
