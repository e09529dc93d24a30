"""What the no-torch stop suggests: a torch the user already has first (a wheel pip's configuration
offers locally: ``--torch`` builds its base with pip, which takes it), then one put next to bisector the way it was
installed (``pipx inject``, ``uv tool install --with``, ``pip install``), each with its download size.
Every suggestion is a command that runs as printed on that route; none names bisector as a package on
the index (it is not published there)."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import NamedTuple, Optional

from packaging.utils import canonicalize_name, parse_wheel_filename

from bisector.envs.builders.torch_size import _compatible_tags, local_sources
from bisector.safety import safe_toml


class LocalTorch(NamedTuple):
    version: str            # as its wheel or base names it (2.13.0+cpu)
    wheel: Path             # the wheel file
    size: int


def _wheels(python_version: str) -> list[LocalTorch]:
    """torch wheels pip's configuration offers locally that this interpreter can install, newest first."""
    links, indexes = local_sources()
    files = [p for d in links for p in d.glob("torch-*.whl")]
    files += [p for root in indexes for p in (root / "torch").glob("torch-*.whl")]
    ranked = set(_compatible_tags(python_version))
    out = []
    for p in files:
        try:
            name, version, _, file_tags = parse_wheel_filename(p.name)
        except Exception:
            continue
        if canonicalize_name(name) == "torch" and ranked & set(file_tags) and p.is_file():
            out.append((version, LocalTorch(str(version), p, p.stat().st_size)))
    return [t for _, t in sorted(out, key=lambda x: x[0], reverse=True)]


def local_torches() -> list[LocalTorch]:
    """Torches here already, no torch download: the local wheels pip's configuration offers."""
    try:
        return _wheels(".".join(map(str, sys.version_info[:3])))
    except OSError:
        return []


def _uv_source(prefix: Path) -> Optional[str]:
    """The source ``uv tool install`` installed bisector from (its receipt), as uv takes it back."""
    try:
        receipt = safe_toml.loads((prefix / "uv-receipt.toml").read_text())
    except (OSError, ValueError):
        return None
    for req in (receipt.get("tool") or {}).get("requirements") or []:
        if not isinstance(req, dict) or canonicalize_name(str(req.get("name", ""))) != "bisector":
            continue
        for key in ("editable", "directory", "path", "url"):
            if isinstance(req.get(key), str):
                return ("--editable " if key == "editable" else "") + req[key]
        if isinstance(req.get("git"), str):
            return "git+" + req["git"].removeprefix("git+")
    return None


def route() -> tuple[str, Optional[str]]:
    """How bisector was installed: ('pipx', venv name), ('uv', source or None) or ('pip', None)."""
    prefix = Path(sys.prefix)
    if (prefix / "pipx_metadata.json").exists():
        return "pipx", prefix.name
    if (prefix / "uv-receipt.toml").exists():
        return "uv", _uv_source(prefix)
    return "pip", None


def next_to_bisector(requirement: str) -> Optional[str]:
    """The command that installs ``requirement`` (a ``torch==X`` or a wheel's path) next to bisector on
    its install route; None where no runnable one can be said (a uv tool whose source is unknown)."""
    how, detail = route()
    requirement = shlex.quote(requirement)
    if how == "pipx":
        return f"pipx inject {shlex.quote(str(detail))} {requirement}"
    if how == "uv":
        return f"uv tool install --reinstall {detail} --with {requirement}" if detail else None
    return f"{shlex.quote(sys.executable)} -m pip install {requirement}"
