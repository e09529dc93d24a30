"""What a torch costs before it is installed: the packages ``torch==X`` resolves to for an interpreter
(uv resolves them, reading only the wheels' metadata) and the sizes the package index gives for their
files, or the local files pip's configuration offers (``find-links`` directories, ``file://`` indexes:
no download). Said before a build, never guessed: what the index does not say is counted as unknown."""
from __future__ import annotations

import platform
import re
import sys
import tempfile
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from packaging import tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel

from bisector.core.units import human_bytes
from bisector.envs.tooling.tool_runs import clean_env, run
from bisector.errors import BisectorError, EnvironmentFailure
from bisector.sources.index import content_length, fetch_project, project_url
from bisector.sources.installer_config import pip_settings, resolve_index_url, uv_binary

HEAVY = re.compile(r"^(torch|triton|pytorch-triton(-.+)?|nvidia-.+|cuda-.+)$")


class TorchDownload(BaseModel):
    """The heavy files a ``torch==version`` install fetches for one interpreter."""

    version: str                          # as resolved (a local file's label kept: 2.13.0+cpu)
    torch_bytes: int = 0
    library_bytes: int = 0                # nvidia-*, cuda-*, triton: the CUDA libraries torch needs
    libraries: int = 0
    local_bytes: int = 0                  # of those, found in find-links directories: not downloaded
    unknown: list[str] = []               # heavy packages whose size could not be read

    @property
    def total_bytes(self) -> int:
        return self.torch_bytes + self.library_bytes

    def describe(self) -> str:
        """'torch 2.11.0: a 2.52 GiB download (the torch wheel 506.02 MiB, 19 CUDA libraries 2.03 GiB)'."""
        download = self.total_bytes - self.local_bytes
        parts = [f"the torch wheel {human_bytes(self.torch_bytes)}"]
        if self.libraries:
            parts.append(f"{self.libraries} CUDA libraries {human_bytes(self.library_bytes)}")
        unknown = f"; sizes unknown for {', '.join(self.unknown)}" if self.unknown else ""
        if not download:
            return f"torch {self.version}: no download (local files: {', '.join(parts)}){unknown}"
        local = f", {human_bytes(self.local_bytes)} of it local files" if self.local_bytes else ""
        return f"torch {self.version}: a {human_bytes(download)} download ({', '.join(parts)}{local}){unknown}"


def _compatible_tags(python_version: str) -> list[tags.Tag]:
    major_minor = tuple(int(p) for p in python_version.split(".")[:2])
    return [*tags.cpython_tags(major_minor), *tags.compatible_tags(major_minor)]


def _best_file(files: list[tuple], version: str, ranked: dict[tags.Tag, int]) -> Optional[int]:
    """The size of the most preferred wheel of ``version`` among (filename, size, ...) for these tags."""
    found = _best_entry(files, version, ranked)
    return found[1] if found else None


def _best_entry(files: list[tuple], version: str, ranked: dict[tags.Tag, int]) -> Optional[tuple]:
    """The most preferred wheel of ``version`` among (filename, ...) entries for these tags."""
    best: Optional[tuple[int, tuple]] = None
    for entry in files:
        filename = entry[0]
        try:
            _, found, _, file_tags = parse_wheel_filename(filename)
        except Exception:
            continue
        if not _same(found, version):
            continue
        rank = min((ranked[t] for t in file_tags if t in ranked), default=None)
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, entry)
    return best[1] if best else None


def _same(found: Version, version: str) -> bool:
    try:
        wanted = Version(version)
    except InvalidVersion:
        return False
    return found == wanted


def resolve(version: str, python: Path, index_url: Optional[str], find_links: list[str]) -> list[tuple[str, str]]:
    """(name, version) of everything ``torch==version`` installs for ``python`` (uv's resolution)."""
    binary = uv_binary()
    if binary is None:
        raise EnvironmentFailure("uv not found")
    args = [binary, "pip", "compile", "-", "--python", str(python), "--no-header", "--no-annotate", "--quiet"]
    args += ["--default-index", index_url] if index_url else []
    for link in find_links:
        args += ["--find-links", link]
    done = _uv_output(args, f"torch=={version}\n")
    pins = [line.split("==", 1) for line in done.splitlines() if "==" in line and not line.startswith("#")]
    return [(canonicalize_name(n.strip()), v.strip()) for n, v in pins]


def _uv_output(args: list[str], text: str) -> str:
    """uv's stdout for ``args`` reading ``text`` (through a file: run() takes no stdin)."""
    with tempfile.TemporaryDirectory(prefix="bisector-torch-size-") as tmp:
        req = Path(tmp) / "requirements.in"
        req.write_text(text)
        return run([a if a != "-" else str(req) for a in args], "resolving torch's files", env=clean_env(),
                   timeout=300).stdout


_HREF = re.compile(r'href="([^"#]+)')


def local_sources() -> tuple[list[Path], list[Path]]:
    """Where pip finds wheels without downloading: its ``find-links`` directories and its ``file://``
    indexes (a PEP 503 tree of ``<name>/index.html`` pages)."""
    pip = pip_settings()
    links = [Path(u.removeprefix("file://")) for u in pip.find_links if "://" not in u or u.startswith("file://")]
    indexes = [Path(u.removeprefix("file://")) for u in [pip.index_url or "", *pip.extra_index_urls]
               if u.startswith("file://")]
    return [d for d in links if d.is_dir()], [d for d in indexes if d.is_dir()]


def _local_files(name: str, sources: tuple[list[Path], list[Path]]) -> list[tuple[str, int]]:
    """(filename, size) of every local wheel of ``name`` those sources hold."""
    links, indexes = sources
    files = [p for d in links for p in d.glob("*.whl") if canonicalize_name(p.name.split("-")[0]) == name]
    for root in indexes:
        page = root / name / "index.html"
        try:
            hrefs = _HREF.findall(page.read_text(errors="replace"))
        except OSError:
            continue
        files += [(page.parent / h).resolve() for h in hrefs if h.endswith(".whl")]
    return [(p.name, p.stat().st_size) for p in files if p.is_file()]


def _python_version(python: Path) -> str:
    code = "import platform; print(platform.python_version())"
    return run([python, "-c", code], "asking the interpreter its version", env=clean_env()).stdout.strip()


def interpreter_tags(python: Path) -> list[tags.Tag]:
    """The wheel tags ``python`` installs, most preferred first (this machine's platform)."""
    same = Path(python) == Path(sys.executable)
    return _compatible_tags(platform.python_version() if same else _python_version(python))


def estimate(version: str, python: Path, python_version: Optional[str] = None,
             index_url: Optional[str] = None) -> TorchDownload:
    """What installing ``torch==version`` for ``python`` (of ``python_version``, asked when None) fetches,
    as pip would install it: files pip's configuration has locally (find-links, file:// indexes) are
    counted as local, the rest at the size the index gives. BisectorError when it cannot be resolved."""
    python_version = python_version or _python_version(python)
    sources = local_sources()
    url = resolve_index_url(index_url)
    pins = [(n, v) for n, v in resolve(version, python, url, [str(d) for d in sources[0]]) if HEAVY.match(n)]
    ranked = {t: i for i, t in enumerate(_compatible_tags(python_version))}

    def size(pin: tuple[str, str]) -> tuple[str, Optional[int], bool]:
        name, found = pin
        local = _best_file(_local_files(name, sources), found, ranked)
        if local is not None:
            return name, local, True
        try:
            page = fetch_project(url, name)
        except BisectorError:
            return name, None, False
        files = [(f.get("filename", ""), f.get("size"), f.get("url", "")) for f in page.get("files", [])]
        best = _best_entry(files, found, ranked)
        if best is None or best[1]:
            return name, int(best[1]) if best else None, False
        return name, content_length(urllib.parse.urljoin(project_url(url, name), best[2])), False   # an HTML page

    with ThreadPoolExecutor(max_workers=8) as pool:
        sizes = list(pool.map(size, pins))
    torch_version = dict(pins).get("torch", version)
    out = TorchDownload(version=torch_version)
    for name, nbytes, local in sizes:
        if nbytes is None:
            out.unknown.append(name)
            continue
        if name == "torch":
            out.torch_bytes += nbytes
        else:
            out.library_bytes += nbytes
            out.libraries += 1
        out.local_bytes += nbytes if local else 0
    return out


def describe_or_unknown(version: str, python: Path, python_version: Optional[str] = None,
                        index_url: Optional[str] = None) -> str:
    """:meth:`TorchDownload.describe`, or why the size could not be told (never an exception)."""
    try:
        return estimate(version, python, python_version, index_url).describe()
    except (BisectorError, OSError, ValueError) as exc:
        return f"torch {version}: size unknown ({exc})"
