"""The real CPU torch wheel this machine has (found through pip's configuration: its find-links directories
and file:// indexes, as bisector.envs.builders.torch_size finds local wheels) and the wheels of torch's
dependencies there, as streamed wheels for a loopback index (tests/support/wheel_relabel.py)."""
from __future__ import annotations

import importlib.metadata
import re
import zipfile
from pathlib import Path
from typing import Optional

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from bisector.envs.builders.torch_advice import local_torches
from bisector.envs.builders.torch_size import local_sources
from tests.support.wheel_relabel import VirtualWheel

TORCH_DEPENDENCIES = ("filelock", "typing-extensions", "setuptools", "sympy", "mpmath", "networkx", "jinja2",
                      "markupsafe", "fsspec")


def local_torch_wheel(version: str = "2.13.0") -> Optional[Path]:
    """The local CPU wheel of torch ``version`` pip's configuration offers (None when there is none)."""
    return next((t.wheel for t in local_torches() if t.version.split("+")[0] == version), None)


def local_wheel(name: str) -> Optional[Path]:
    """A local wheel of ``name`` from pip's find-links directories and file:// indexes: of the version
    installed here when there is one (what this torch runs with), else the newest."""
    links, indexes = local_sources()
    files = [p for d in links for p in d.glob("*.whl")]
    for root in indexes:
        page = root / canonicalize_name(name) / "index.html"
        if page.is_file():
            files += [(page.parent / h).resolve() for h in re.findall(r'href="([^"#]+\.whl)', page.read_text())]
    found = []
    for p in files:
        try:
            project, version, _, _ = parse_wheel_filename(p.name)
        except Exception:
            continue
        if canonicalize_name(project) == canonicalize_name(name) and p.is_file():
            found.append((version, p))
    try:
        here = Version(importlib.metadata.version(name))
    except (importlib.metadata.PackageNotFoundError, ValueError):
        here = None
    mine = [(v, p) for v, p in found if v == here]
    return max(mine or found)[1] if found else None


def whole(wheel: Path) -> VirtualWheel:
    """A wheel file served as it is (one segment of it: no copy)."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        metadata = zf.read(meta)
    return VirtualWheel(wheel.name, [(str(wheel.resolve()), 0, wheel.stat().st_size)], metadata)
