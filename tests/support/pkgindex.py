"""Tiny wheels built by hand and a loopback-only package index serving them.

``build_wheel`` writes a pure-Python wheel with zipfile (no build backend, no network).
``LocalIndex`` keeps wheels with upload times and serves them over HTTP on 127.0.0.1:
the PEP 691 JSON simple API (with PEP 700 ``upload-time``/``versions`` and PEP 714
``core-metadata``, unless ``core_metadata=False``), the PEP 503 HTML fallback, and the files
themselves (with HTTP range requests). uv and pip both
read ``upload-time`` from the JSON API, so ``--exclude-newer`` / ``--uploaded-prior-to``
work against it. ``json_api=False`` serves the HTML pages only (as PyTorch's wheel indexes do).
``add_virtual`` publishes a wheel that is never stored whole (tests/support/wheel_relabel.py: a real
wheel re-labelled, streamed from the original's bytes); ``remove`` takes a file off the index.
"""
from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import html
import json
import re
import shutil
import threading
import urllib.parse
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator, Mapping, Sequence, Union

from tests.support.wheel_relabel import VirtualWheel

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_FIXED_ZIP_TIME = (2020, 1, 1, 0, 0, 0)


def normalize(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _metadata(name: str, version: str, dependencies: Sequence[str], project_urls: Sequence[str] = ()) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {dep}" for dep in dependencies]
    lines += [f"Project-URL: {url}" for url in project_urls]
    return "\n".join(lines) + "\n\n"


def build_wheel(
    out_dir: Path,
    name: str,
    version: str,
    *,
    dependencies: Sequence[str] = (),
    module_source: str | None = None,
    project_urls: Sequence[str] = (),
    console_scripts: Mapping[str, str] | None = None,
) -> Path:
    """Write ``<name>-<version>-py3-none-any.whl`` into ``out_dir`` and return its path.

    The wheel holds the module ``<name>/__init__.py`` (dashes become underscores) with
    ``__version__ = "<version>"`` followed by ``module_source``, plus METADATA (with one
    ``Requires-Dist`` per dependency and one ``Project-URL`` per "Label, URL"), WHEEL, top_level.txt,
    entry_points.txt when ``console_scripts`` names any (name -> "module:function": the installer writes
    each into the environment's bin) and RECORD. Deterministic.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    module = re.sub(r"[-.]+", "_", name).lower()
    dist = f"{module}-{version}"
    source = f'__version__ = "{version}"\n' + (module_source or "")
    files = {
        f"{module}/__init__.py": source.encode(),
        f"{dist}.dist-info/METADATA": _metadata(name, version, dependencies, project_urls).encode(),
        f"{dist}.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tests.support\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n\n"
        ).encode(),
        f"{dist}.dist-info/top_level.txt": f"{module}\n".encode(),
    }
    if console_scripts:
        files[f"{dist}.dist-info/entry_points.txt"] = ("[console_scripts]\n" + "".join(
            f"{script} = {target}\n" for script, target in console_scripts.items())).encode()
    record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in files.items()]
    record.append(f"{dist}.dist-info/RECORD,,")
    files[f"{dist}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = out_dir / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zf.writestr(zipfile.ZipInfo(path, _FIXED_ZIP_TIME), data)
    return wheel


def _wheel_metadata(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
        return zf.read(names[0])


def _iso(moment: dt.datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("upload_time must be timezone-aware")
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@contextlib.contextmanager
def served(handler) -> Iterator[str]:
    """``handler`` (a request handler class) served on 127.0.0.1, a free port, in a thread; yield ``.../simple/``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class LocalIndex:
    """A package index on disk under ``root``, served on loopback by :meth:`serve`.

    ``root/files`` holds the wheels (and their ``.metadata`` files), ``root/index.json``
    the upload times and yank state, so a second ``LocalIndex(root)`` sees the same index.
    """

    def __init__(self, root: Path, core_metadata: bool = True, json_api: bool = True):
        self.root = Path(root)
        self.core_metadata = core_metadata   # False: advertise no PEP 658/714 metadata files (old uploads)
        self.json_api = json_api             # False: the PEP 503 HTML pages only, whatever the client accepts
        self.files_dir = self.root / "files"
        self.files_dir.mkdir(parents=True, exist_ok=True)
        self._manifest = self.root / "index.json"
        self._lock = threading.Lock()
        self._entries: list[dict] = (
            json.loads(self._manifest.read_text()) if self._manifest.exists() else []
        )

    def add(self, wheel_path: Path, upload_time: dt.datetime, yanked: Union[bool, str] = False) -> None:
        """Publish a wheel, as if uploaded at ``upload_time`` (timezone-aware)."""
        wheel_path = Path(wheel_path)
        name, version = wheel_path.name.split("-")[:2]
        target = self.files_dir / wheel_path.name
        shutil.copyfile(wheel_path, target)
        metadata = _wheel_metadata(target)
        (self.files_dir / (wheel_path.name + ".metadata")).write_bytes(metadata)
        entry = {
            "project": normalize(name),
            "version": version,
            "filename": wheel_path.name,
            "sha256": hashlib.sha256(target.read_bytes()).hexdigest(),
            "metadata_sha256": hashlib.sha256(metadata).hexdigest(),
            "size": target.stat().st_size,
            "upload_time": _iso(upload_time),
            "yanked": yanked,
        }
        with self._lock:
            self._entries = [e for e in self._entries if e["filename"] != wheel_path.name]
            self._entries.append(entry)
            self._manifest.write_text(json.dumps(self._entries, indent=1))

    def add_virtual(self, wheel: "VirtualWheel", upload_time: dt.datetime) -> None:
        """Publish a streamed wheel (never written whole), as if uploaded at ``upload_time``."""
        wheel.save(self.files_dir)
        (self.files_dir / (wheel.filename + ".metadata")).write_bytes(wheel.metadata)
        name, version = wheel.filename.split("-")[:2]
        entry = {"project": normalize(name), "version": version, "filename": wheel.filename,
                 "sha256": wheel.sha256, "metadata_sha256": hashlib.sha256(wheel.metadata).hexdigest(),
                 "size": wheel.size, "upload_time": _iso(upload_time), "yanked": False}
        with self._lock:
            self._entries = [e for e in self._entries if e["filename"] != wheel.filename] + [entry]
            self._manifest.write_text(json.dumps(self._entries, indent=1))

    def remove(self, filename: str) -> None:
        """Take a file off the index (as an index that deletes old nightlies does)."""
        with self._lock:
            self._entries = [e for e in self._entries if e["filename"] != filename]
            self._manifest.write_text(json.dumps(self._entries, indent=1))

    def projects(self) -> list[str]:
        """Normalised names of the projects with at least one file."""
        with self._lock:
            return sorted({e["project"] for e in self._entries})

    def files(self, project: str) -> list[dict]:
        """Manifest entries of one project, oldest upload first."""
        with self._lock:
            chosen = [e for e in self._entries if e["project"] == normalize(project)]
        return sorted(chosen, key=lambda e: e["upload_time"])

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """Serve the index on 127.0.0.1 (a free port) in a thread; yield ``.../simple/``."""
        with served(type("Handler", (_IndexHandler,), {"index": self})) as url:
            yield url


def project_json(index: LocalIndex, project: str) -> dict:
    """The PEP 691 / PEP 700 JSON page of one project."""
    files = []
    for e in index.files(project):
        files.append({
            "filename": e["filename"],
            "url": f"../../files/{e['filename']}",
            "hashes": {"sha256": e["sha256"]},
            "core-metadata": {"sha256": e["metadata_sha256"]},
            "size": e["size"],
            "upload-time": e["upload_time"],
            "yanked": e["yanked"],
        })
        if not index.core_metadata:
            del files[-1]["core-metadata"]
    versions = sorted({e["version"] for e in index.files(project)})
    return {"meta": {"api-version": "1.1"}, "name": normalize(project), "versions": versions, "files": files}


def project_html(index: LocalIndex, project: str) -> str:
    """The PEP 503 HTML page of one project (with PEP 592 yanks and PEP 714 metadata)."""
    links = []
    for e in index.files(project):
        attrs = f'href="../../files/{urllib.parse.quote(e["filename"])}#sha256={e["sha256"]}"'
        attrs += f' data-core-metadata="sha256={e["metadata_sha256"]}"' if index.core_metadata else ""
        if e["yanked"] is not False:
            reason = e["yanked"] if isinstance(e["yanked"], str) else ""
            attrs += f' data-yanked="{html.escape(reason)}"'
        links.append(f'<a {attrs}>{e["filename"]}</a><br/>')
    body = "\n".join(links)
    return f"<!DOCTYPE html><html><body><h1>{project}</h1>\n{body}\n</body></html>\n"


class _IndexHandler(BaseHTTPRequestHandler):
    index: LocalIndex
    head = False   # answering a HEAD request: headers only

    def log_message(self, format: str, *args: object) -> None:  # quiet
        return

    def do_HEAD(self) -> None:  # noqa: N802 (http.server API)
        self.head = True
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        parts = [urllib.parse.unquote(p) for p in path.split("/") if p]
        if parts[:1] == ["files"] and len(parts) == 2:
            return self._send_file(parts[1])
        if parts == ["simple"]:
            return self._send_listing()
        if len(parts) == 2 and parts[0] == "simple":
            return self._send_project(parts[1])
        self._send(404, "text/plain", b"not found")

    def _wants_json(self) -> bool:
        return self.index.json_api and JSON_TYPE in self.headers.get("Accept", "")

    def _send(self, code: int, ctype: str, data: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not self.head:
            self.wfile.write(data)

    def _send_file(self, filename: str) -> None:
        path = self.index.files_dir / filename
        if "/" in filename or filename.startswith("."):
            return self._send(404, "text/plain", b"not found")
        if not path.is_file() and (self.index.files_dir / f"{filename}.segments.json").is_file():
            return self._send_virtual(VirtualWheel.load(self.index.files_dir, filename))
        if not path.is_file():
            return self._send(404, "text/plain", b"not found")
        if filename.endswith(".metadata") and not self.index.core_metadata:
            return self._send(404, "text/plain", b"not found")
        data = path.read_bytes()
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if wanted is None:
            return self._send(200, "application/octet-stream", data)
        start, end = int(wanted[1]), min(int(wanted[2] or len(data) - 1), len(data) - 1)
        self.send_response(206)   # a range request, as PyPI's file host answers them
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        if not self.head:
            self.wfile.write(data[start:end + 1])

    def _send_virtual(self, wheel: "VirtualWheel") -> None:
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        start, end = (int(wanted[1]), min(int(wanted[2] or wheel.size - 1), wheel.size - 1)) if wanted else \
            (0, wheel.size - 1)
        self.send_response(206 if wanted else 200)
        self.send_header("Content-Type", "application/octet-stream")
        if wanted:
            self.send_header("Content-Range", f"bytes {start}-{end}/{wheel.size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        for chunk in [] if self.head else wheel.chunks(start, end + 1):
            self.wfile.write(chunk)

    def _send_listing(self) -> None:
        names = self.index.projects()
        if self._wants_json():
            doc = {"meta": {"api-version": "1.1"}, "projects": [{"name": n} for n in names]}
            return self._send(200, JSON_TYPE, json.dumps(doc).encode())
        links = "".join(f'<a href="{n}/">{n}</a><br/>' for n in names)
        self._send(200, "text/html", f"<!DOCTYPE html><html><body>{links}</body></html>".encode())

    def _send_project(self, name: str) -> None:
        if not self.index.files(name):
            return self._send(404, "text/plain", b"not found")
        if self._wants_json():
            return self._send(200, JSON_TYPE, json.dumps(project_json(self.index, name)).encode())
        self._send(200, "text/html", project_html(self.index, name).encode())
