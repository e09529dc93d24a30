"""A real wheel re-labelled with another version, written as a stream and never stored whole.

``relabel`` takes a wheel (the local CPU torch wheel, 180 MB) and returns a :class:`VirtualWheel`: the
same zip with its ``.dist-info`` directory renamed for the new version, METADATA's ``Version`` (and,
when asked, extra ``Requires-Dist`` lines), the package's ``version.py`` (``__version__`` and
``git_version``) rewritten, extra files added (a marker a test probe reads), and RECORD rewritten with
every file's sha256 and size (the unchanged files' entries are the original RECORD's: their bytes are
the original's). Each unchanged member's compressed bytes are copied from the original file at its
offset, so a re-labelled wheel is a list of segments (ranges of the original, and a few KiB of new
bytes): its size and sha256 are computed by streaming it once, and the index serves it by streaming it
again (tests/support/pkgindex.py). Seven nightlies of torch cost no disk.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, Union

Segment = Union[bytes, tuple[str, int, int]]      # new bytes, or (original file, offset, length)
_LOCAL = struct.Struct("<IHHHHHIIIHH")             # a local file header, without name and extra
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")     # a central directory header, without name/extra/comment
_END = struct.Struct("<IHHHHIIH")
CHUNK = 1 << 20


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@dataclass
class VirtualWheel:
    """A wheel as segments; ``metadata`` is its METADATA (the index serves it as PEP 658 metadata)."""

    filename: str
    segments: list[Segment]
    metadata: bytes
    size: int = 0
    sha256: str = ""
    _sizes: list[int] = field(default_factory=list)

    def __post_init__(self):
        self._sizes = [len(s) if isinstance(s, bytes) else s[2] for s in self.segments]
        self.size = sum(self._sizes)
        digest = hashlib.sha256()
        for chunk in self.chunks():
            digest.update(chunk)
        self.sha256 = digest.hexdigest()

    def chunks(self, start: int = 0, end: Optional[int] = None) -> Iterator[bytes]:
        """The bytes ``start`` .. ``end`` (exclusive; default: to the end), in chunks."""
        end = self.size if end is None else min(end, self.size)
        at = 0
        for seg, size in zip(self.segments, self._sizes):
            lo, hi = max(start, at), min(end, at + size)
            if lo < hi:
                if isinstance(seg, bytes):
                    yield seg[lo - at:hi - at]
                else:
                    with open(seg[0], "rb") as fh:
                        fh.seek(seg[1] + lo - at)
                        left = hi - lo
                        while left:
                            data = fh.read(min(CHUNK, left))
                            if not data:
                                raise OSError(f"{seg[0]} is shorter than the segment")
                            left -= len(data)
                            yield data
            at += size

    def write(self, path: Path) -> Path:
        """The wheel as a real file (for a check; the index never needs one)."""
        with open(path, "wb") as fh:
            for chunk in self.chunks():
                fh.write(chunk)
        return path

    def save(self, directory: Path) -> None:
        """``<filename>.segments.json`` (and ``.own``, the new bytes) in ``directory``: what the index streams."""
        own, plan = bytearray(), []
        for seg in self.segments:
            if isinstance(seg, bytes):
                plan.append(["own", len(own), len(seg)])
                own += seg
            else:
                plan.append(list(seg))
        (directory / f"{self.filename}.own").write_bytes(bytes(own))
        (directory / f"{self.filename}.segments.json").write_text(json.dumps(plan))

    @staticmethod
    def load(directory: Path, filename: str) -> "VirtualWheel":
        plan = json.loads((directory / f"{filename}.segments.json").read_text())
        own = str(directory / f"{filename}.own")
        segments: list[Segment] = [(own, o, n) if src == "own" else (src, o, n) for src, o, n in plan]
        return VirtualWheel(filename, segments, b"")


def _dos_time(info: zipfile.ZipInfo) -> tuple[int, int]:
    y, mo, d, h, mi, s = info.date_time
    return (h << 11) | (mi << 5) | (s // 2), ((y - 1980) << 9) | (mo << 5) | d


class _Writer:
    """Collects members (raw compressed bytes from the original, or new stored bytes) and the directory."""

    def __init__(self):
        self.segments: list[Segment] = []
        self.offset = 0
        self.central = bytearray()
        self.count = 0

    def _add(self, seg: Segment) -> None:
        self.segments.append(seg)
        self.offset += len(seg) if isinstance(seg, bytes) else seg[2]

    def member(self, name: str, method: int, crc: int, csize: int, usize: int, data: Segment,
               when: tuple[int, int], external: int) -> None:
        raw = name.encode()
        flags = 0x800 if any(b > 127 for b in raw) else 0
        header = _LOCAL.pack(0x04034B50, 20, flags, method, *when, crc, csize, usize, len(raw), 0) + raw
        self.central += _CENTRAL.pack(0x02014B50, 0x031E, 20, flags, method, *when, crc, csize, usize, len(raw),
                                      0, 0, 0, 0, external, self.offset) + raw
        self.count += 1
        self._add(header)
        self._add(data)

    def new(self, name: str, data: bytes) -> None:
        self.member(name, zipfile.ZIP_STORED, zlib.crc32(data), len(data), len(data), data,
                    (0, (2020 - 1980) << 9 | 1 << 5 | 1), 0o644 << 16)

    def finish(self) -> list[Segment]:
        start = self.offset
        self._add(bytes(self.central))
        self._add(_END.pack(0x06054B50, 0, 0, self.count, self.count, len(self.central), start, 0))
        return self.segments


def _data_start(fh, info: zipfile.ZipInfo) -> int:
    fh.seek(info.header_offset)
    head = fh.read(_LOCAL.size)
    fields = _LOCAL.unpack(head)
    if fields[0] != 0x04034B50:
        raise ValueError(f"no local header for {info.filename}")
    return info.header_offset + _LOCAL.size + fields[9] + fields[10]


def _version_py(text: str, version: str, git_version: Optional[str]) -> str:
    text = re.sub(r"^__version__\s*=.*$", f"__version__ = '{version}'", text, count=1, flags=re.M)
    if git_version is not None:
        text = re.sub(r"^git_version\s*=.*$", f"git_version = '{git_version}'", text, count=1, flags=re.M)
    return text


def relabel(source: Path, version: str, *, module_version: Optional[str] = None,
            git_version: Optional[str] = None, requires: Sequence[str] = (),
            extra_files: Optional[dict[str, bytes]] = None,
            leave_out: Callable[[str], bool] = lambda path: False) -> VirtualWheel:
    """``source`` (a wheel) as version ``version`` (its METADATA, dist-info and filename), its
    ``__version__`` ``module_version`` (default: ``version``; PyPI's torch says 2.13.0 in its metadata
    and 2.13.0+cu130 in ``__version__``), ``git_version`` in its ``version.py``, ``requires`` added to
    METADATA, ``extra_files`` (path -> bytes) added, the files ``leave_out`` names left out (and out of
    RECORD)."""
    source = Path(source).resolve()
    parts = source.name[:-4].split("-")
    name, old_version, tags = parts[0], parts[1], "-".join(parts[2:])
    old_dist, new_dist = f"{name}-{old_version}.dist-info", f"{name}-{version}.dist-info"
    package = name.replace("-", "_")
    module_version = module_version or version
    extra_files = dict(extra_files or {})
    writer, changed = _Writer(), {}
    with zipfile.ZipFile(source) as zf, open(source, "rb") as fh:
        infos = zf.infolist()
        record_name = f"{old_dist}/RECORD"
        meta = zf.read(f"{old_dist}/METADATA").decode()
        meta = re.sub(r"^Version: .*$", f"Version: {version}", meta, count=1, flags=re.M)
        if requires:
            head, sep, body = meta.partition("\n\n")
            meta = head + "".join(f"\nRequires-Dist: {r}" for r in requires) + sep + body
        changed[f"{new_dist}/METADATA"] = meta.encode()
        version_py = f"{package}/version.py"
        if version_py in zf.namelist():
            changed[version_py] = _version_py(zf.read(version_py).decode(), module_version, git_version).encode()
        changed.update(extra_files)
        for info in infos:
            if info.filename == record_name:
                continue
            new_name = info.filename.replace(old_dist + "/", new_dist + "/", 1)
            if new_name in changed or leave_out(info.filename):
                continue
            start = _data_start(fh, info)
            writer.member(new_name, info.compress_type, info.CRC, info.compress_size, info.file_size,
                          (str(source), start, info.compress_size), _dos_time(info), info.external_attr)
        for new_name, data in changed.items():
            writer.new(new_name, data)
        lines = []
        for line in zf.read(record_name).decode().splitlines():
            path = line.rsplit(",", 2)[0]
            renamed = path.replace(old_dist + "/", new_dist + "/", 1)
            if renamed in changed or renamed == f"{new_dist}/RECORD" or leave_out(path):
                continue
            lines.append(renamed + line[len(path):])
        lines += [f"{p},{record_hash(d)},{len(d)}" for p, d in changed.items()]
        lines.append(f"{new_dist}/RECORD,,")
        writer.new(f"{new_dist}/RECORD", ("\n".join(lines) + "\n").encode())
    filename = f"{name}-{version}-{tags}.whl"
    return VirtualWheel(filename, writer.finish(), changed[f"{new_dist}/METADATA"])
