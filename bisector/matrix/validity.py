"""Which cells of a grid are not a valid combination, by the packages' own metadata, before any build.

Each release in a cell (the grid packages and the exact pins) is read for its ``Requires-Dist``
(:mod:`bisector.sources.dist_metadata`). A requirement on another package of the cell that excludes
that package's version makes the cell invalid: unconditionally, or when every extra of the release
that names the other package excludes it (transformers 4.32.1 wants ``accelerate>=0.20.3`` in each of
its extras that name accelerate, and checks it when it is imported). Markers other than ``extra`` are
evaluated for this interpreter. A release whose metadata cannot be read is not judged (a note says so).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from bisector.errors import BisectorError
from bisector.sources.dist_metadata import DistMetadata, applies, read_metadata


_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


def conflict(meta: DistMetadata, package: str, other: str, version: str) -> Optional[str]:
    """Why ``meta``'s release (of ``package``) declares ``other`` at ``version`` unusable, or None."""
    try:
        wanted = Version(version)
    except InvalidVersion:
        return None
    unconditional, by_extra = [], {}
    named = [r for r in meta.requirements() if canonicalize_name(r.name) == canonicalize_name(other)]
    extras = set(meta.provides_extra) | {e for r in named if r.marker for e in _EXTRA.findall(str(r.marker))}
    for req in named:
        if applies(req):
            unconditional.append(req)
            continue
        for extra in sorted(extras):
            if applies(req, extra):
                by_extra.setdefault(extra, []).append(req)
    for req in unconditional:
        if not req.specifier.contains(wanted, prereleases=True):
            return f"{package} {meta.version} requires {other}{req.specifier}"
    if unconditional or not by_extra:
        return None
    refusing = {e: r for e, reqs in by_extra.items() for r in reqs
                if not r.specifier.contains(wanted, prereleases=True)}
    if len(refusing) < len(by_extra):
        return None   # some extra of the release accepts it
    spec = sorted({str(r.specifier) for r in refusing.values()})
    extras = sorted(by_extra)
    shown = ", ".join(extras[:3]) + (f" and {len(extras) - 3} more" if len(extras) > 3 else "")
    return (f"{package} {meta.version} requires {other}{' or '.join(spec)} "
            f"(in {'its extra' if len(extras) == 1 else 'every extra that names it'}: {shown})")


class Checker:
    """Reads each release's metadata once and judges cells (package -> version) with it."""

    def __init__(self, index_url: str, cache_dir: Path):
        self.index_url, self.cache_dir = index_url, cache_dir
        self._meta: dict[tuple[str, str], Optional[DistMetadata]] = {}
        self.unread: dict[str, str] = {}   # "package version" -> why its metadata could not be read

    def metadata(self, package: str, version: str) -> Optional[DistMetadata]:
        """The release's metadata (None when it cannot be read; ``unread`` says why)."""
        key = (canonicalize_name(package), version)
        if key not in self._meta:
            try:
                found = read_metadata(self.index_url, package, version, self.cache_dir)
                if found is None:
                    self.unread[f"{package} {version}"] = "no wheel on the index (an sdist needs a build)"
            except BisectorError as exc:
                found = None
                self.unread[f"{package} {version}"] = str(exc)
            self._meta[key] = found
        return self._meta[key]

    def why_invalid(self, versions: dict[str, str]) -> Optional[str]:
        """The first declared conflict among the cell's releases, or None."""
        reasons = []
        for package, version in versions.items():
            meta = self.metadata(package, version)
            if meta is None:
                continue
            for other, other_version in versions.items():
                if other != package:
                    found = conflict(meta, package, other, other_version)
                    if found:
                        reasons.append(found)
        return "; ".join(reasons) or None
