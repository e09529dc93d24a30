"""What the no-torch stop suggests: a torch the user already has first (the torch of another of their
interpreters, when it is a real release that can be installed again here; else a wheel pip's configuration
offers locally: ``--torch`` builds its base with pip, which takes it), else the index's newest; each with
what it downloads, and the command that puts it next to bisector the way bisector was installed
(bisector.sources.install_route: ``pipx inject``, ``uv tool install --with``, ``uv pip install``, ``pip install``).
Every suggestion is a command that runs as printed on that route; none names bisector as a package on
the index (it is not published there)."""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import NamedTuple, Optional

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from bisector.envs.builders.torch_elsewhere import other_torches
from bisector.envs.builders.torch_size import _compatible_tags, describe_or_unknown, local_sources
from bisector.errors import BisectorError
from bisector.sources.index import list_releases
from bisector.sources.installer_config import resolve_index_url


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


class Offer(NamedTuple):
    version: str            # what --torch takes
    source: str             # where it comes from, in words
    cost: str               # 'no download (local files: ...)', 'a 2.42 GiB download (...)'
    requirement: str        # what goes next to bisector: the local wheel's path, or torch==X


def _exact(a: str, b: str) -> bool:
    return Version(a) == Version(b)


def index_torches(index_url: Optional[str]) -> list[str]:
    """The usable torch releases the index lists, oldest first (none when it cannot be read)."""
    try:
        return [r.version for r in list_releases(resolve_index_url(index_url), "torch") if r.usable]
    except BisectorError:
        return []


def cost_of(version: str, index_url: Optional[str]) -> str:
    """'no download (local files: ...)' or 'a 2.42 GiB download (...)' for installing ``torch==version``
    for bisector's interpreter, as pip would (bisector.envs.builders.torch_size)."""
    said = describe_or_unknown(version, Path(sys.executable), sys.version.split()[0], index_url)
    return re.sub(r"^torch \S+: ", "", said)


def offers(index_url: Optional[str]) -> list[Offer]:
    """What --torch can take with the least download first: another interpreter's torch (a real release
    that a local wheel or the index serves again), a local wheel, the index's newest."""
    local, listed, out = local_torches(), index_torches(index_url), []
    for other in other_torches():
        wheel = next((t for t in local if _exact(t.version, other.version)), None)
        public = Version(other.version).public
        if wheel is not None:
            out.append(Offer(other.version, f"the torch of {other.python}, as a wheel pip's configuration offers "
                             "locally", cost_of(other.version, index_url), str(wheel.wheel)))
        elif any(_exact(v, other.version) for v in listed):
            out.append(Offer(other.version, f"the torch of {other.python}, from the index",
                             cost_of(other.version, index_url), f"torch=={other.version}"))
        elif any(_exact(v, public) for v in listed):
            out.append(Offer(public, f"the release of {other.python}'s torch {other.version}, from the index",
                             cost_of(public, index_url), f"torch=={public}"))
        if out:
            break
    if not out and local:
        t = local[0]
        out.append(Offer(t.version, "a wheel pip's configuration offers locally", cost_of(t.version, index_url),
                         str(t.wheel)))
    if listed and not any(_exact(o.version, listed[-1]) for o in out):
        out.append(Offer(listed[-1], "the index's newest", cost_of(listed[-1], index_url), f"torch=={listed[-1]}"))
    return out
