"""Starting the user's command with the meter injected, and ending this probe as the command ended (stdlib only).

The command runs as given (its own stdin, stdout and stderr; in this probe's process group) with a generated
``sitecustomize`` first on ``PYTHONPATH``: it loads the in-process meter (``_inprocess.py``, as the package
``_bisector_command``) into every Python process of the command, then the environment's own ``sitecustomize``
if it has one. The records directory and the run's key reach the meter only through that file (never the
environment), so the program neither sees where the records are nor can sign one.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from _meters.cgroup import oom_kills

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM = '''"""bisector's command meter (generated): the meter, then this environment's own sitecustomize."""
import importlib as _importlib
import importlib.machinery as _machinery
import importlib.util as _util
import os as _os
import sys as _sys

try:
    _package = type(_sys)("_bisector_command")
    _package.__path__ = [{here!r}]
    _sys.modules.setdefault("_bisector_command", _package)
    _importlib.import_module("_bisector_command._inprocess").install({records!r}, bytes.fromhex({key!r}), {kind!r},
                                                                   {device!r}, {options!r})
except Exception as _exc:  # the program runs as it would without the meter; the probe says why
    try:
        with open(_os.path.join({records!r}, "%d.error" % _os.getpid()), "w") as _fh:
            _fh.write("%s: %s" % (type(_exc).__name__, _exc))
    except OSError:
        pass

_here = _os.path.dirname(_os.path.abspath(__file__))
_rest = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
_next = _machinery.PathFinder.find_spec("sitecustomize", _rest)
if _next is not None and _next.loader is not None:
    _module = _util.module_from_spec(_next)
    _sys.modules["sitecustomize"] = _module
    _next.loader.exec_module(_module)
'''


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


def _command_env(shim_dir):
    env = dict(os.environ)
    env.pop("BISECTOR_RESULT", None)   # the program's own business is not this probe's result
    env["PYTHONPATH"] = shim_dir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    bin_dir = os.path.join(shim_dir, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    if console_scripts(bin_dir):   # after this environment's own bin, before anything else on PATH
        own = os.path.dirname(sys.executable)
        rest = [p for p in env.get("PATH", "").split(os.pathsep) if p and os.path.abspath(p) != own]
        env["PATH"] = os.pathsep.join([own, bin_dir, *rest])
    return env


def run(args, records, key):
    """Run the command with the meter injected: (exit code, wall seconds, why it could not start or None,
    the cgroup's OOM-kill count before and after)."""
    shim_dir = tempfile.mkdtemp(prefix="bisector-meter-")
    try:
        device = args.device or os.environ.get("BISECTOR_DEVICE") or "auto"
        with open(os.path.join(shim_dir, "sitecustomize.py"), "w") as fh:
            fh.write(SHIM.format(here=HERE, records=records, key=key.hex(), kind=args.meter, device=device,
                                 options=meter_options(args)))
        env = _command_env(shim_dir)
        kills = [oom_kills(), None]
        start = time.perf_counter()
        try:
            child = subprocess.Popen(args.command, env=env)
        except (FileNotFoundError, PermissionError) as exc:
            return 127, 0.0, _cannot_run(args.command[0], exc), kills
        # SIGTERM to this probe alone reaches the command too (Ctrl-C reaches the whole group by itself)
        previous = signal.signal(signal.SIGTERM, lambda s, _f: child.send_signal(s))
        try:
            code = child.wait()
        finally:
            signal.signal(signal.SIGTERM, previous)
        kills[1] = oom_kills()
        return code, time.perf_counter() - start, None, kills
    finally:
        shutil.rmtree(shim_dir, ignore_errors=True)


def meter_options(args):
    """What the in-process meter is told beyond its kind and device: where the package under test lives (its
    frames place an allocation: ``$BISECTOR_PACKAGE``), which storages are placed (``--site-min-bytes``), whether
    the program runs on fake tensors (``--fake``)."""
    from _package_dirs import package_dirs

    return {"sites": {"package_dirs": package_dirs(os.environ.get("BISECTOR_PACKAGE")),
                      "min_bytes": getattr(args, "site_min_bytes", None)}, "fake": bool(getattr(args, "fake", False))}


def _cannot_run(program, exc):
    """Why the command's program did not start: not in this environment (its bin, its console scripts) nor
    on PATH, or not executable."""
    if isinstance(exc, PermissionError):
        return f"the command's program {program} is not executable ({exc.strerror})"
    if "/" in program:
        return f"the command's program {program} does not exist (from {os.getcwd()})"
    return (f"the command's program {program!r} is neither in this environment (its bin, its console scripts) nor "
            "on PATH: this candidate does not install it")


def signal_line(sig, kills):
    """The line the host reads as the reason of a command killed by ``sig`` (None: nothing more to say).
    SIGKILL is the out-of-memory killer's signal: said so where the cgroup's count rose, denied where it did not."""
    name = _name(sig)
    if sig != signal.SIGKILL:
        return f"killed by signal {sig} ({name})"
    before, after = kills
    if before is None or after is None:
        return None   # the host says "likely out of memory"
    if after > before:
        return (f"killed (SIGKILL): out of memory (the kernel's OOM killer: the cgroup's oom_kill count went {before} "
                f"-> {after})")
    return f"killed (SIGKILL), not by the out-of-memory killer (the cgroup's oom_kill count stayed at {after})"


def _name(sig):
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def die_like(sig):
    """End this probe by ``sig``, as the command ended: its parent sees the same death (no core file of ours)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    except (ImportError, OSError, ValueError):
        pass
    if sig not in (signal.SIGKILL, signal.SIGSTOP):   # those two cannot be caught, nor set (EINVAL)
        try:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        except (OSError, ValueError):
            pass
    os.kill(os.getpid(), sig)
    time.sleep(1)   # a signal whose default is not to die (SIGCHLD, SIGSTOP): exit as a shell reports it
    os._exit(128 + sig)
