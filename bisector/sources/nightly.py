"""Nightly wheels on a nightly index: PEP 440 dev versions ``X.Y.Z.devYYYYMMDD`` whose local label names
the build (``+cpu``, ``+cu130``), one a day, read from the index's project page (PEP 691 JSON, or the PEP
503 HTML that PyTorch's indexes serve). A nightly's day is its dev number; its upload time, where the
index gives one, is its candidate date.

Which nightlies lie between two releases X < Y (:func:`between_releases`): the dev versions of a release
after X up to Y (``X < base version <= Y``: for consecutive minor releases, the ``Y.dev`` nightlies, which
main publishes from X's branch cut on, weeks before X itself is uploaded), dated no later than Y's upload,
of the same build (local label) as the bases being compared. Nightlies of X's own version predate X's
branch cut; patch releases (X.Y.1) come from a release branch and have no nightlies between them."""
from __future__ import annotations

import datetime as dt
import re
from typing import Optional

from packaging.utils import parse_wheel_filename
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel

from bisector.core.candidate import Candidate, CandidateKind
from bisector.errors import UsageError, cut
from bisector.sources.index import fetch_project, parse_time

_DAY = re.compile(r"^(\d{4})-?(\d{2})-?(\d{2})$")


class Nightly(BaseModel):
    """One day's build of one label: its full version (label kept), its day, its upload time."""

    version: str
    day: dt.date
    label: Optional[str] = None
    uploaded: Optional[dt.datetime] = None

    @property
    def parsed(self) -> Version:
        return Version(self.version)

    @property
    def base(self) -> Version:
        """The release this is a dev version of (2.14.0 for 2.14.0.dev20261001+cpu)."""
        return Version(self.parsed.base_version)


def nightly_day(version: Version | str) -> Optional[dt.date]:
    """The day of a nightly's dev version (``.dev20261001`` -> 2026-10-01); None for anything else."""
    try:
        v = Version(str(version))
    except InvalidVersion:
        return None
    match = _DAY.match(str(v.dev)) if v.dev is not None else None
    if not match:
        return None
    try:
        return dt.date(*map(int, match.groups()))
    except ValueError:
        return None


def label_of(version: str) -> Optional[str]:
    """A version's local label (``cpu`` of ``2.13.0+cpu``); None without one or when it is no version."""
    try:
        return Version(version).local
    except InvalidVersion:
        return None


def nightlies_from_page(page: dict) -> list[Nightly]:
    """The page's wheels of dated dev versions, one entry per version (label kept), by day then version."""
    found: dict[Version, Nightly] = {}
    for entry in page.get("files", []):
        try:
            _, version, _, _ = parse_wheel_filename(entry.get("filename", ""))
        except Exception:
            continue
        day = nightly_day(version)
        if day is None:
            continue
        uploaded = parse_time(entry.get("upload-time"))   # (a checked page's: text in UTC)
        known = found.get(version)
        if known is None or (uploaded and (known.uploaded is None or uploaded < known.uploaded)):
            found[version] = Nightly(version=str(version), day=day, label=version.local, uploaded=uploaded)
    return sorted(found.values(), key=lambda n: (n.day, n.parsed))


def list_nightlies(index_url: str, package: str) -> list[Nightly]:
    """Every dated nightly of ``package`` on the nightly index."""
    return nightlies_from_page(fetch_project(index_url, package))


def parse_day(text: str) -> tuple[dt.date, Optional[str]]:
    """A nightly endpoint as a user names it: a day (``2026-10-01``, ``20261001``) or a nightly's version
    (``2.14.0.dev20261001+cpu``, which also names the build); UsageError otherwise."""
    cleaned = text.strip()
    match = _DAY.match(cleaned)
    if match:
        try:
            return dt.date(*map(int, match.groups())), None
        except ValueError:
            pass
    day = nightly_day(cleaned.removeprefix("v"))
    if day is None:
        raise UsageError(f"'{cut(text)}' is neither a day (2026-10-01) nor a nightly's version (2.14.0.dev20261001+cpu)")
    return day, label_of(cleaned.removeprefix("v"))


def candidate(package: str, nightly: Nightly) -> Candidate:
    """The candidate a nightly is: its version (label kept) and its upload time (else its day)."""
    when = nightly.uploaded or dt.datetime.combine(nightly.day, dt.time(), dt.timezone.utc)
    return Candidate(package=package, kind=CandidateKind.NIGHTLY, ref=nightly.version, date=when)


def by_day(nightlies: list[Nightly], label: Optional[str]) -> list[Nightly]:
    """One nightly a day for the build ``label``: that build's (the newest version that day), else, for a
    day the index holds only other builds of, that day's version with this label (which the index lacks:
    its measurement is a SKIP saying so, never another build's wheel)."""
    days: dict[dt.date, list[Nightly]] = {}
    for n in nightlies:
        days.setdefault(n.day, []).append(n)
    out = []
    for day, found in sorted(days.items()):
        mine = [n for n in found if n.label == label]
        if mine:
            out.append(max(mine, key=lambda n: n.parsed))
            continue
        public = max(n.parsed.public for n in found)
        out.append(Nightly(version=f"{public}+{label}" if label else public, day=day, label=label))
    return out


def builds(nightlies: list[Nightly]) -> list[str]:
    """The labels (builds) the nightlies come in, sorted; '' for unlabelled ones."""
    return sorted({n.label or "" for n in nightlies})


def between_releases(nightlies: list[Nightly], older: str, newer: str, newer_uploaded: Optional[dt.datetime],
                     label: Optional[str]) -> list[Nightly]:
    """The nightlies between releases ``older`` and ``newer`` of the build ``label`` (see the module)."""
    lo, hi = Version(Version(older).base_version), Version(Version(newer).base_version)
    last = newer_uploaded.date() if newer_uploaded else None
    inside = [n for n in nightlies if lo < n.base <= hi and (last is None or n.day <= last)]
    return by_day(inside, label)


def between_days(nightlies: list[Nightly], first: dt.date, last: dt.date, label: Optional[str]) -> list[Nightly]:
    """The nightlies of the build ``label`` from day ``first`` to day ``last``, both included."""
    return by_day([n for n in nightlies if first <= n.day <= last], label)
