"""The warm worker: a fork server for one probe in one candidate environment (stdlib only).

Never imported: run by path with the candidate environment's interpreter, which has no bisector (so it imports
the standard library only, and nothing of bisector's; bisector.measure.warm_server starts it). Started by the
orchestrator as ``<env python> warm_worker.py SCRIPT`` with a control socket (an
AF_UNIX SOCK_SEQPACKET) on the descriptor named by ``$BISECTOR_WARM_FD``. It loads the probe's
script as a module (its ``__main__`` guard keeps it from running), calls the probe's
``warm_imports()`` (the probe's opt-in, probes/CONTRACT.md: the heavy modules its runs import)
and checks that the imports left the process as a fresh one would be at that point: no CUDA or
NVML initialised (the rule: CUDA is initialised only in a child, never in the worker; a child
forked after CUDA init would inherit a broken context), no Python thread started, autocast off,
grad mode on, float32 the default dtype. Then it says ``ready`` (or ``refused``, with why: the
orchestrator then runs that probe in plain processes) and serves requests.

Each request is one probe run: its arguments, its whole environment, its working directory and the
write ends of its stdout and stderr pipes (passed over the socket). The worker forks a child that
starts its own session (the orchestrator stops its process group as it stops a plain probe's), dies
with the worker (PR_SET_PDEATHSIG), replaces ``os.environ`` by the request's (what the imports did to
the worker's environment done to it too, as they would have in a fresh process), restores the default
signal handlers, closes the worker's descriptors and runs the script as ``__main__`` with
``sys.argv`` set, as ``python SCRIPT ARGS`` would from the same imports. It ends like an interpreter
does (non-daemon threads joined, atexit handlers run, stdio flushed) with the script's exit code.
The worker itself never runs probe code after ``warm_imports``: every child is a copy of the same
untouched image, so nothing of an earlier run reaches a later one. It reports each child's pid and
exit code (negative: killed by that signal) and ends when the control socket closes, killing the
children still running.

Nothing a run starts outlives it, as under bisector's launcher (bisector/process/launcher.py): the
worker is a child subreaper (PR_SET_CHILD_SUBREAPER), so what a run leaves behind is reparented to
it, not to init. When a run ends, before its exit is reported, the worker kills every process of
the run's session and, once no other run is in flight, every process reparented to it (a daemon that
left the session), and reaps them.
"""
import array
import atexit
import ctypes
import importlib.util
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
import time
import traceback
import warnings

FD_ENV = "BISECTOR_WARM_FD"
MAX_MESSAGE = 1 << 20
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
SWEEP_ROUNDS = 50  # kill, reap, look again: a process forking as it dies is caught within these rounds
HOOK = "warm_imports"  # the probe's opt-in (probes/_probe_contract.py: WARM_HOOK)
UNSHAREABLE_LIBS = ("libcuda.so", "libnvidia-ml.so")  # loaded only once CUDA / NVML is initialised


def _send(sock, message):
    sock.send(json.dumps(message).encode())


def _receive(sock):
    """One message and the descriptors that came with it; (None, []) when the socket closed."""
    fds = array.array("i")
    data, ancillary, _flags, _addr = sock.recvmsg(MAX_MESSAGE, socket.CMSG_LEN(16 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    if not data:
        return None, list(fds)
    return json.loads(data), list(fds)


def _die_with_parent():
    """PR_SET_PDEATHSIG: SIGKILL this process when its parent ends (Linux; elsewhere a no-op)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _become_subreaper():
    """PR_SET_CHILD_SUBREAPER: orphans of a run's subtree are reparented to this worker (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _processes():
    """(pid, ppid, session) of every live process (Linux's /proc; nothing elsewhere); zombies left out."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            out.append((int(name), int(fields[1]), int(fields[3])))
    return out


def sweep(ended, running):
    """Kill what the ended runs (their pids: the ids of their sessions) left behind, and when no run
    is ``running``, every process reparented to this worker; reap those that are its children."""
    me = os.getpid()
    for _ in range(SWEEP_ROUNDS):
        victims = [(pid, ppid) for pid, ppid, sid in _processes()
                   if pid != me and pid not in running and (sid in ended or (not running and ppid == me))]
        if not victims:
            return
        for pid, _ppid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid, ppid in victims:
            if ppid == me:
                try:
                    os.waitpid(pid, 0)
                except OSError:
                    pass
        time.sleep(0.005)


def _exit_code(status):
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def state_problems():
    """What makes this process unlike a fresh one at the point after its imports (empty: like one)."""
    problems = []
    try:
        with open("/proc/self/maps") as fh:
            maps = fh.read()
        problems += [f"{lib} is loaded (CUDA or NVML was initialised by the imports)"
                     for lib in UNSHAREABLE_LIBS if lib in maps]
    except OSError:
        pass
    if threading.active_count() > 1:
        names = sorted(t.name for t in threading.enumerate() if t is not threading.main_thread())
        problems.append(f"the imports started Python threads: {', '.join(names)}")
    torch = sys.modules.get("torch")
    if torch is not None:
        if torch.cuda.is_initialized():
            problems.append("CUDA was initialised by the imports")
        if not torch.is_grad_enabled():
            problems.append("grad mode is off")
        if torch.get_default_dtype() != torch.float32:
            problems.append(f"the default dtype is {torch.get_default_dtype()}")
        for device in ("cpu", "cuda"):
            try:
                on = torch.is_autocast_enabled(device)
            except TypeError:  # torch < 2.4
                on = torch.is_autocast_cpu_enabled() if device == "cpu" else torch.is_autocast_enabled()
            if on:
                problems.append(f"autocast is on for {device}")
    return problems


def _warm_up(script):
    """Load the probe's script as a module and run its opt-in; returns (seconds, problems, ``os.environ``
    before and after the imports)."""
    start = time.perf_counter()
    directory = os.path.dirname(os.path.abspath(script))
    if not getattr(sys.flags, "safe_path", False):  # as `python SCRIPT` puts the script's directory first
        sys.path[0] = directory
    before = dict(os.environ)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = importlib.util.spec_from_file_location("__bisector_warm_probe__", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        hook = getattr(module, HOOK, None)
        if not callable(hook):
            return time.perf_counter() - start, [f"the probe does not opt in (no {HOOK}() in {script})"], before, before
        hook()
    return time.perf_counter() - start, state_problems(), before, dict(os.environ)


def run_environ(request, before, after):
    """A run's environment: the request's, with what the imports did to the worker's environment done
    to it too, as the same imports in a fresh process would (the two agree on every variable the worker
    has); a variable the imports set that only the request has (one of a single run's) keeps its value."""
    env = dict(request)
    for name in before:
        if name not in after:
            env.pop(name, None)
    for name, value in after.items():
        if before.get(name) != value and (name in before or name not in env):
            env[name] = value
    return env


def _finish_like_an_interpreter(code):
    """Join non-daemon threads, run atexit handlers, flush stdio, and leave with ``code``."""
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join()
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream: nothing left to flush
                pass
        os._exit(code)


def _system_exit_code(exc):
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _drop_atexit(names):
    """Unregister atexit handlers the worker registered that this run's fresh process would not have."""
    for name in names:
        module, _, function = name.partition(":")
        handler = getattr(sys.modules.get(module), function, None)
        if handler is not None:
            atexit.unregister(handler)


def _child(script, request, fds, keep_closed, environ):
    """In the forked child: become a fresh probe process and run the script; never returns."""
    code = 1
    try:
        os.setsid()
        _die_with_parent()
        if os.getppid() != request["server"]:  # the worker ended before the signal was armed
            os._exit(1)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in keep_closed:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        for source, target in ((null, 0), (fds[0], 1), (fds[1], 2)):
            os.dup2(source, target)
        for fd in (null, *fds):
            os.close(fd)
        env = run_environ(request["env"], *environ)
        os.environ.clear()
        os.environ.update(env)
        _drop_atexit(request.get("drop_atexit", ()))
        os.chdir(request["cwd"])
        sys.argv = [script, *request["args"]]
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = _system_exit_code(exc)
        except KeyboardInterrupt:
            code = -int(signal.SIGINT)
        except BaseException:  # noqa: BLE001 - printed as the interpreter would
            traceback.print_exc()
            code = 1
    except BaseException:  # noqa: BLE001 - the set-up failed: say so on the run's stderr
        traceback.print_exc()
    if code < 0:  # end by that signal, as an interpreter interrupted by it does
        try:
            atexit._run_exitfuncs()
        finally:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
    _finish_like_an_interpreter(code)


def serve(sock, script, environ):
    """Fork a child per request until the control socket closes; report each start and exit
    (``environ``: the worker's environment before and after its imports)."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children = {}  # pid -> request id
    server = os.getpid()
    try:
        while True:
            readable, _, _ = select.select([sock, wake_r], [], [])
            if wake_r in readable:
                os.read(wake_r, 4096)
            _reap(sock, children)
            if sock not in readable:
                continue
            request, fds = _receive(sock)
            if request is None or request.get("op") == "close":
                for fd in fds:
                    os.close(fd)
                return
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError as exc:
                _send(sock, {"op": "failed", "id": request["id"], "why": f"fork failed: {exc}"})
                for fd in fds:
                    os.close(fd)
                continue
            if pid == 0:
                _child(script, {**request, "server": server}, fds, (sock.fileno(), wake_r, wake_w), environ)
            for fd in fds:
                os.close(fd)
            children[pid] = request["id"]
            _send(sock, {"op": "started", "id": request["id"], "pid": pid})
    finally:
        for pid in children:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap(None, children, block=True)
        sweep(set(), set())


def _reap(sock, children, block=False):
    """Reap the runs that ended (and any orphan of theirs that ended); sweep up after each run before
    its exit is reported. ``block``: wait until every run has ended (the worker is ending)."""
    while not (block and not children):
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        request_id = children.pop(pid, None)
        if request_id is None:
            continue  # an orphan of a run, reparented here
        sweep({pid}, set(children))
        if sock is not None:
            _send(sock, {"op": "exited", "id": request_id, "code": _exit_code(status)})


def main():
    script = sys.argv[1]
    _become_subreaper()
    sock = socket.socket(fileno=int(os.environ.pop(FD_ENV)))  # its end closing (the orchestrator gone) ends this
    try:
        seconds, problems, before, after = _warm_up(script)
    except BaseException as exc:  # noqa: BLE001 - the orchestrator runs the probe cold and sees the real error
        _send(sock, {"op": "refused", "why": f"the warm-up failed: {type(exc).__name__}: {exc}"[:500]})
        return 0
    if problems:
        _send(sock, {"op": "refused", "why": "; ".join(problems), "seconds": seconds})
        return 0
    _send(sock, {"op": "ready", "pid": os.getpid(), "seconds": round(seconds, 3),
                 "threads": len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None})
    serve(sock, script, (before, after))
    return 0


if __name__ == "__main__":
    os._exit(main())
