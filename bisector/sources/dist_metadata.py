"""A release's core metadata (``Requires-Dist``, ``Provides-Extra``) read from the package index,
without installing it, and the one reader of requirement lines (:func:`requirements`, :func:`applies`) that
every other reader of ``Requires-Dist`` uses (a nightly's pins, a torch base's closure, a matrix cell's
validity).

In order: the PEP 658/714 metadata file the index advertises next to a wheel; else the wheel's
``*.dist-info/METADATA`` read with HTTP range requests (the zip's central directory and that one
member: a few requests, a few hundred KB of a multi-MB wheel); else the whole wheel when the server
ignores ranges. Read metadata is cached on disk by the wheel's sha256, so a nightly run reads each
release once. A release with only an sdist has no metadata without a build: None.
"""
from __future__ import annotations

import email.parser
import hashlib
import io
import re
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import Iterable, Optional, Union

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel

from bisector.errors import BisectorError
from bisector.redact import redact_url
from bisector.sources.index import fetch_project

TIMEOUT_S = 60
WHOLE_WHEEL_LIMIT = 256 * 1024 * 1024   # a server without range requests: read wheels up to this size
_BLOCK = 256 * 1024                     # the range reader's read size


class DistMetadata(BaseModel):
    """The parts of a release's METADATA that say what it works with."""

    name: str
    version: str
    requires_dist: list[str] = []
    provides_extra: list[str] = []
    source: str   # where it was read: "index metadata file", "wheel (range requests)", "wheel", "cache"

    def requirements(self) -> list[Requirement]:
        """``Requires-Dist`` parsed (see :func:`requirements`)."""
        return requirements(self.requires_dist)


def requirements(lines: Iterable[str]) -> list[Requirement]:
    """Requirement lines (``Requires-Dist``) parsed; an unparsable line, which installers would reject too,
    is left out."""
    out = []
    for line in lines:
        try:
            out.append(Requirement(line))
        except InvalidRequirement:
            continue
    return out


def applies(req: Requirement, extra: str = "", markers: Optional[dict[str, str]] = None) -> bool:
    """Whether ``req`` applies with ``extra`` asked for ("": none), its markers evaluated for ``markers`` (an
    interpreter's environment markers; default: this interpreter's)."""
    if req.marker is None:
        return True
    return req.marker.evaluate({**default_environment(), **(markers or {}), "extra": extra})


def _get(url: str, headers: Optional[dict] = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        raise BisectorError(f"{redact_url(url)} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise BisectorError(f"cannot read {redact_url(url)}: {exc}") from None


class _RangeFile(io.RawIOBase):
    """A remote file read through HTTP range requests (what ``zipfile`` needs: seek, tell, read)."""

    def __init__(self, url: str, size: int):
        super().__init__()
        self.url, self.size, self.pos = url, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def readinto(self, buffer) -> int:
        if self.pos >= self.size:
            return 0
        end = min(self.size, self.pos + len(buffer)) - 1
        status, _, data = _get(self.url, {"Range": f"bytes={self.pos}-{end}"})
        if status != 206:
            raise BisectorError(f"{redact_url(self.url)} ignores range requests")
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)


def _total_size(url: str) -> Optional[int]:
    """The file's size from a one-byte range request (None when the server ignores ranges)."""
    status, headers, _ = _get(url, {"Range": "bytes=0-0"})
    found = re.search(r"/(\d+)$", headers.get("Content-Range", ""))
    return int(found[1]) if status == 206 and found else None


def _metadata_member(archive: zipfile.ZipFile) -> bytes:
    names = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
    if not names:
        raise BisectorError("the wheel has no .dist-info/METADATA")
    return archive.read(names[0])


def _from_wheel(url: str, size_hint: Optional[int]) -> tuple[bytes, str]:
    size = _total_size(url)
    if size is not None:
        with zipfile.ZipFile(io.BufferedReader(_RangeFile(url, size), _BLOCK)) as archive:
            return _metadata_member(archive), "wheel (range requests)"
    if size_hint is not None and size_hint > WHOLE_WHEEL_LIMIT:
        raise BisectorError(f"{redact_url(url)} ignores range requests and is {size_hint} bytes")
    _, _, data = _get(url)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return _metadata_member(archive), "wheel"


def _wheel_entry(page: dict, package: str, version: str) -> Optional[dict]:
    """A wheel of the release (a pure-Python one first: every wheel of a release declares the same
    requirements in practice, and the pure one is the smallest)."""
    wanted, found = Version(version), []
    for entry in page.get("files", []):
        name = entry.get("filename", "")
        if not name.endswith(".whl"):
            continue
        try:
            if parse_wheel_filename(name)[1] == wanted:
                found.append(entry)
        except (InvalidVersion, ValueError):
            continue
    found.sort(key=lambda e: (not e["filename"].endswith("-none-any.whl"), e.get("size") or 0))
    return found[0] if found else None


def parse_metadata(raw: Union[bytes, str], source: str) -> DistMetadata:
    """A METADATA file's headers (``raw``: its bytes, or its text); ``source``: where it was read."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    message = email.parser.Parser().parsestr(text, headersonly=True)
    return DistMetadata(name=str(message.get("Name", "")), version=str(message.get("Version", "")),
                        requires_dist=[str(x) for x in message.get_all("Requires-Dist") or []],
                        provides_extra=[str(x) for x in message.get_all("Provides-Extra") or []], source=source)


def read_metadata(index_url: str, package: str, version: str, cache_dir: Path,
                  page: Optional[dict] = None) -> Optional[DistMetadata]:
    """The release's metadata (None when it has no wheel); ``page``: its project page, when already read.
    BisectorError when the index or the file cannot be read."""
    page = page if page is not None else fetch_project(index_url, package)
    entry = _wheel_entry(page, package, version)
    if entry is None:
        return None
    url = urllib.parse.urljoin(index_url.rstrip("/") + f"/{canonicalize_name(package)}/", entry["url"])
    digest = (entry.get("hashes") or {}).get("sha256") or hashlib.sha256(url.encode()).hexdigest()
    cached = cache_dir / "metadata" / f"{digest}.METADATA"
    if cached.is_file():
        return parse_metadata(cached.read_bytes(), "cache")
    advertised = entry.get("core-metadata") or entry.get("data-dist-info-metadata")
    if advertised:
        raw, source = _get(url.split("#", 1)[0] + ".metadata")[2], "index metadata file"
    else:
        raw, source = _from_wheel(url.split("#", 1)[0], entry.get("size"))
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{hashlib.sha256(raw).hexdigest()[:8]}.part")
    partial.write_bytes(raw)
    partial.replace(cached)   # atomic: a concurrent run reads a whole file or none
    return parse_metadata(raw, source)
