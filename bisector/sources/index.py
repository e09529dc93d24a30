"""Release candidates from a package index (PEP 691 JSON simple API, PEP 700 upload times)."""
from __future__ import annotations

import base64
import contextlib

import datetime as dt
import urllib.error
import urllib.parse
import urllib.request
from typing import Iterator, Optional

from packaging.utils import canonicalize_name, parse_wheel_filename, parse_sdist_filename
from packaging.version import Version
from pydantic import BaseModel

from bisector.core.candidate import Candidate, CandidateKind
from bisector.errors import BisectorError, UsageError, cut
from bisector.redact import redact_url
from bisector.sources.index_answer import checked_page, parsed_json, read_answer
from bisector.sources.simple_html import page_from_html

JSON_ACCEPT = "application/vnd.pypi.simple.v1+json, application/json;q=0.5"


class Release(BaseModel):
    """One version of a package on the index, with its first upload time."""

    version: str
    uploaded: Optional[dt.datetime] = None
    yanked: bool = False

    @property
    def parsed(self) -> Version:
        """The version, parsed (PEP 440)."""
        return Version(self.version)

    @property
    def usable(self) -> bool:
        """Neither a pre-release nor yanked (what a range holds unless --pre)."""
        return not (self.parsed.is_prerelease or self.yanked)


def release_candidate(package: str, release: Release) -> Candidate:
    """The candidate a release is: its version and upload time (the one place this is made)."""
    return Candidate(package=package, kind=CandidateKind.RELEASE, ref=release.version, date=release.uploaded)


def parse_version(text: str) -> Version:
    """Parse a user-given version: ``v0.20``, ``0.20`` and ``0.20.0`` are the same version."""
    cleaned = text.strip()
    if cleaned[:1] in ("v", "V"):
        cleaned = cleaned[1:]
    try:
        return Version(cleaned)
    except ValueError:   # InvalidVersion, or a number past Python's int-string limit
        raise UsageError(f"'{cut(text)}' is not a valid version") from None


def _file_version(name: str, filename: str) -> Optional[Version]:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except Exception:
        return None


def parse_time(value: Optional[str]) -> Optional[dt.datetime]:
    """A checked page's upload time (ISO 8601 text in UTC: bisector.sources.index_answer), as a time."""
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _authenticated(url: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    """``user:password@`` in an index URL as the Basic credentials pip and uv send (urllib would read it
    as part of the host name)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, headers
    user, password = urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), {**headers, "Authorization": f"Basic {token}"}


def project_url(index_url: str, package: str) -> str:
    """The URL of a project's page on a simple index (what its files' relative URLs are relative to)."""
    return urllib.parse.urljoin(index_url.rstrip("/") + "/", canonicalize_name(package) + "/")


def fetch_project(index_url: str, package: str) -> dict:
    """Fetch a project's PEP 691 JSON page from the index (an index that answers with its PEP 503 HTML
    page instead is read through bisector.sources.simple_html: no sizes, no upload times), within a connect
    timeout and a deadline for the whole answer, checked (bisector.sources.index_answer): a page that is not
    one is a line naming the index."""
    name = canonicalize_name(package)
    url = project_url(index_url, package)
    if url.startswith("file:"):
        raise UsageError(f"index {redact_url(index_url)} is a file index; an HTTP(S) simple API is needed")
    plain, headers = _authenticated(url, {"Accept": JSON_ACCEPT})
    request = urllib.request.Request(plain, headers=headers)
    what = f"index {redact_url(index_url)}: {name}'s page"
    try:
        raw, ctype = read_answer(request, what)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise UsageError(f"package '{package}' not found on {redact_url(index_url)}") from None
        raise BisectorError(f"index {redact_url(index_url)} answered HTTP {exc.code} for {name}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise BisectorError(f"cannot read {redact_url(url)}: {exc}") from None
    page = page_from_html(raw.decode("utf-8", "replace"), url) if "html" in ctype.lower() else parsed_json(raw, what)
    return checked_page(page, what)   # every reader of a page takes it checked (bisector.sources.index_answer)


def read_small(url: str, limit: int = 1 << 22, timeout: float = 60) -> Optional[bytes]:
    """A small file from an index (a wheel's PEP 658 metadata), with the index URL's credentials; None
    when it cannot be read."""
    plain, headers = _authenticated(url, {})
    try:
        return read_answer(urllib.request.Request(plain, headers=headers), redact_url(url), timeout, limit)[0]
    except (urllib.error.URLError, OSError, ValueError, UsageError):
        return None


def content_length(url: str, timeout: float = 60) -> Optional[int]:
    """A file's size as the index's HEAD answer gives it (an HTML index gives no sizes); None when unknown."""
    plain, headers = _authenticated(url, {})
    try:
        request = urllib.request.Request(plain, headers=headers, method="HEAD")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
        return int(length) if length and length.isdigit() else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def releases_from_page(package: str, page: dict) -> list[Release]:
    """Group a PEP 691 page's files into releases: earliest upload time, yanked only if all files are."""
    found: dict[Version, dict] = {}
    for entry in page.get("files", []):
        version = _file_version(package, entry.get("filename", ""))
        if version is None:
            continue
        slot = found.setdefault(version, {"uploaded": None, "yanked": True})
        uploaded = parse_time(entry.get("upload-time"))
        if uploaded and (slot["uploaded"] is None or uploaded < slot["uploaded"]):
            slot["uploaded"] = uploaded
        slot["yanked"] = slot["yanked"] and bool(entry.get("yanked"))
    return [Release(version=str(v), **found[v]) for v in sorted(found)]


_PAGES: Optional[dict[tuple[str, str], list[Release]]] = None   # set inside pages_read_once()


@contextlib.contextmanager
def pages_read_once() -> Iterator[None]:
    """Within the block, each project's page is read from the index once (a command's checks and its
    run see the same releases); outside it every call reads the index afresh."""
    global _PAGES
    outer, _PAGES = _PAGES, ({} if _PAGES is None else _PAGES)
    try:
        yield
    finally:
        _PAGES = outer


def list_releases(index_url: str, package: str) -> list[Release]:
    """All releases of ``package`` on the index, oldest version first."""
    key, pages = (index_url, canonicalize_name(package)), _PAGES
    if pages is None:
        return releases_from_page(package, fetch_project(index_url, package))
    if key not in pages:
        pages[key] = releases_from_page(package, fetch_project(index_url, package))
    return list(pages[key])


def find_release(releases: list[Release], text: str) -> Release:
    """The release a user named, or a usage error listing the nearest existing versions."""
    wanted = parse_version(text)
    for release in releases:
        if release.parsed == wanted:
            return release
    below = [r.version for r in releases if r.parsed < wanted][-2:]
    above = [r.version for r in releases if r.parsed > wanted][:2]
    hint = ", ".join(below + above) or "the package has no releases"
    raise UsageError(f"version {cut(text)} does not exist (nearest: {hint})")


def releases_between(releases: list[Release], good: str, bad: str, pre: bool = False) -> list[Release]:
    """Releases from good to bad inclusive, sorted by version; pre-releases and yanked ones
    are excluded unless ``pre`` (the endpoints themselves are always kept)."""
    lo, hi = find_release(releases, good), find_release(releases, bad)
    if lo.parsed == hi.parsed:
        raise UsageError(f"good and bad name the same version ({lo.version})")
    if lo.parsed > hi.parsed:
        raise UsageError(f"good {lo.version} is newer than bad {hi.version} (use --find-fix to search for a fix)")
    keep = []
    for release in releases:
        if not lo.parsed <= release.parsed <= hi.parsed:
            continue
        endpoint = release.parsed in (lo.parsed, hi.parsed)
        if endpoint or pre or release.usable:
            keep.append(release)
    return keep

