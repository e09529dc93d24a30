"""The command meter's record files: one per process of the command, JSON lines each signed with the run's key.

Written (``RecordFile``, inside the command's processes) only where the meter owns: the file is created
by the meter (``O_EXCL``, ``O_NOFOLLOW``), its descriptor is ``O_CLOEXEC`` and moved above the program's
range (``F_DUPFD_CLOEXEC`` near the descriptor limit: a program's ``open()`` takes the lowest free
number), and before every write ``fstat`` of the descriptor and ``stat`` of the path must both name the
file the meter created. A program that closed the descriptor, reused its number for a file of its own,
or removed the file gets nothing written there: the meter goes on in a new file of its own
(``<pid>-<n>.jsonl``) whose first record says what was lost (``{"kind": "lost", "why": ...}``).

Read (``read_records``, by the probe): every line is ``MAC JSON``, the MAC a keyed BLAKE2b of the JSON
under the run's random key, which reaches the meter through the generated ``sitecustomize`` and never
through the environment; the directory is a fresh private one whose path is not in the environment
either. A line that is not signed with the key, does not parse, or is not a record object is
*rejected*: never summed, and reported (``problems``). Only a last line cut short (a process killed
mid-write) is expected, and counted apart. Standard library only.
"""
import json
import os
import re

try:   # the C module hashlib wraps: a keyed hash without loading OpenSSL into every process of the command
    from _blake2 import blake2b
except ImportError:   # pragma: no cover - an interpreter built without it
    from hashlib import blake2b

SUFFIX = ".jsonl"
MAC_BYTES = 16
_NAME = re.compile(r"^(?P<pid>\d{1,10})(?:-(?P<n>\d{1,4}))?\.jsonl$")
MAX_LINE = 1 << 20   # no record of the meter is this long


def mac(key: bytes, payload: bytes) -> bytes:
    """The line's signature: a keyed BLAKE2b of its JSON, in hex."""
    return blake2b(payload, key=key, digest_size=MAC_BYTES).hexdigest().encode()


def encode(key: bytes, record: dict) -> bytes:
    payload = json.dumps(record, separators=(",", ":"), default=str).encode()
    return mac(key, payload) + b" " + payload + b"\n"


def _high(fd: int) -> int:
    """``fd`` moved near the descriptor limit (close-on-exec), where a program's own files do not land."""
    try:
        import fcntl
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        soft = 4096 if soft in (resource.RLIM_INFINITY, -1) or soft > 4096 else soft
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, max(soft - 64, fd + 1, 3))
    except (ImportError, OSError, ValueError):
        return fd
    os.close(fd)
    return moved


class RecordFile:
    """This process's record file: written only while it is still the file the meter created."""

    def __init__(self, directory: str, key: bytes, pid: int):
        self.directory, self._key, self.pid = directory, key, pid
        self.fd, self.path, self._id, self._part = None, None, None, 0
        self.lost = []   # why earlier files were given up

    def open(self) -> bool:
        name = f"{self.pid}{SUFFIX}" if not self._part else f"{self.pid}-{self._part}{SUFFIX}"
        path = os.path.join(self.directory, name)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(path, flags, 0o600)
        except OSError:
            return False
        self.fd = _high(fd)
        st = os.fstat(self.fd)
        self.path, self._id = path, (st.st_dev, st.st_ino)
        return True

    def _not_ours(self):
        """(why the descriptor no longer writes to the meter's file, whether it is still the meter's to close);
        (None, True) while it does."""
        try:
            st = os.fstat(self.fd)
        except OSError:
            return "the program closed the meter's record descriptor", False
        if (st.st_dev, st.st_ino) != self._id:
            return "the program reused the meter's record descriptor for a file of its own", False
        try:
            on_disk = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return "the meter's record file was removed", True
        if (on_disk.st_dev, on_disk.st_ino) != self._id:
            return "the meter's record file was replaced", True
        return None, True

    def write(self, record: dict) -> None:
        if self.fd is None:
            return
        why, ours = self._not_ours()
        if why is not None:
            self._give_up(why, ours)
            if not self._next_file():
                return
        try:
            os.write(self.fd, encode(self._key, record))
        except OSError:
            pass

    def _give_up(self, why: str, ours: bool) -> None:
        """Forget the descriptor; closed only while it is still the meter's (never a program's file)."""
        if ours:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.lost.append(why)
        self.fd = None

    def _next_file(self) -> bool:
        for _ in range(8):
            self._part += 1
            if self.open():
                os.write(self.fd, encode(self._key, {"kind": "lost", "why": self.lost[-1], "file": self._part}))
                return True
        return False

    def close_inherited(self) -> None:
        """In a forked child: close the parent's descriptor, if it is still the meter's file."""
        if self.fd is not None and self._not_ours() == (None, True):
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.fd = None


def read_records(directory: str, key: bytes):
    """({pid: [record, ...] in order}, problems, cut_short): problems name each rejected line or file
    (at most 20); cut_short counts last lines a kill cut short."""
    files, problems, cut = {}, [], 0
    for name in sorted(os.listdir(directory)):
        match = _NAME.match(name)
        if name.endswith(".error"):
            continue
        if not match:
            problems.append(f"{name}: not a record file of the meter")
            continue
        files.setdefault(int(match["pid"]), []).append((int(match["n"] or 0), name))
    procs = {}
    for pid, parts in sorted(files.items()):
        records = []
        for _, name in sorted(parts):
            lines, short = _lines(os.path.join(directory, name))
            cut += short
            for number, line in lines:
                record, why = _record(key, line)
                if why:
                    problems.append(f"{name}:{number}: {why}")
                else:
                    records.append(record)
        if records:   # a file with no line of the meter's is no process of the command
            procs[pid] = records
    return procs, problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else []), cut


def _lines(path: str):
    try:
        with open(path, "rb") as fh:
            data = fh.read(64 * MAX_LINE)
    except OSError:
        return [], 0
    lines = data.split(b"\n")
    short = 1 if lines[-1] else 0   # a last line without its newline: cut short by a kill
    return [(i + 1, line) for i, line in enumerate(lines[:-1])], short


def _record(key: bytes, line: bytes):
    """(record, None) or (None, why it is rejected)."""
    signature, _, payload = line.partition(b" ")
    if not payload or len(line) > MAX_LINE:
        return None, "not a record line"
    import hmac

    if not hmac.compare_digest(signature, mac(key, payload)):
        return None, "not signed by the meter (written by something else)"
    try:
        record = json.loads(payload)
    except ValueError:
        return None, "does not parse"
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        return None, "not a record object"
    return record, None
