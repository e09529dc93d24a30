"""A nightly's environment, decided before anything is built: the day's torch wheel for this interpreter,
the packages it pins exactly (the ``pytorch-triton==X+<commit>`` CUDA nightlies require) and the
torch-family companions the job asks for (torchvision, torchaudio: the same day's nightly of the same
build), all from the same nightly index. A day that lacks one of them is a SKIP with that reason (never
another build's wheel, never another day's companion).

A nightly's measurement is stored under a fingerprint of what it is (the spec without its indexes, the
interpreter, the nightly's version and label), not of its built environment: a nightly the index has
deleted since keeps its stored measurement, which is reused without its base being rebuilt."""
from __future__ import annotations

import hashlib
import json
import threading
import urllib.parse
from typing import Optional

from packaging.requirements import Requirement
from packaging.tags import Tag
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from bisector.core.candidate import Candidate
from bisector.envs import EnvSpec, interpreter_tags, resolve_interpreter
from bisector.errors import BisectorError, UsageError
from bisector.redact import redact_url
from bisector.sources.dist_metadata import applies, parse_metadata
from bisector.sources.index import fetch_project, project_url, read_small
from bisector.sources.nightly import nightly_day

FAMILY = ("torchvision", "torchaudio")   # companions that exist as nightlies of the same day and build


def nightly_fingerprint(spec: EnvSpec, c: Candidate) -> str:
    """What a nightly's measurement is stored under in place of its environment's fingerprint."""
    python = str(resolve_interpreter(spec.python))
    plain = spec.model_dump(mode="json", exclude={"index_url", "extra_index_urls"})
    text = json.dumps({"spec": plain, "python": python, "nightly": c.ref}, sort_keys=True, separators=(",", ":"))
    return "nightly-" + hashlib.sha256(text.encode()).hexdigest()[:16]


class NightlyIndex:
    """The nightly index of a run: its pages read once; what a nightly candidate's environment needs."""

    def __init__(self, url: str):
        self.url = url
        self._pages: dict[str, Optional[dict]] = {}
        self._lock = threading.Lock()
        self._tags: dict[Optional[str], list[Tag]] = {}

    def _page(self, name: str) -> Optional[dict]:
        key = canonicalize_name(name)
        with self._lock:
            if key in self._pages:
                return self._pages[key]
        try:
            page: Optional[dict] = fetch_project(self.url, key)
        except UsageError:   # not on the index
            page = None
        with self._lock:
            self._pages[key] = page
        return page

    def _interpreter_tags(self, spec: EnvSpec) -> list[Tag]:
        if spec.python not in self._tags:
            self._tags[spec.python] = interpreter_tags(resolve_interpreter(spec.python))
        return self._tags[spec.python]

    def _wheel(self, name: str, version: Version, tags: list[Tag]) -> Optional[dict]:
        """The page entry of ``name``'s wheel of exactly ``version`` this interpreter installs."""
        wanted = set(tags)
        for entry in (self._page(name) or {}).get("files", []):
            try:
                _, found, _, file_tags = parse_wheel_filename(entry.get("filename", ""))
            except Exception:
                continue
            if found == version and wanted & set(file_tags):
                return entry
        return None

    def spec_for(self, spec: EnvSpec, c: Candidate) -> tuple[EnvSpec, Optional[str]]:
        """The spec nightly ``c`` is built under (same-day companions pinned), or why that day is a SKIP."""
        try:
            return self._spec_for(spec, c)
        except BisectorError as exc:
            return spec, f"the nightly index cannot be read: {exc}"

    def _spec_for(self, spec: EnvSpec, c: Candidate) -> tuple[EnvSpec, Optional[str]]:
        tags = self._interpreter_tags(spec)
        version = Version(c.ref)
        wheel = self._wheel(c.package, version, tags)
        if wheel is None:
            return spec, self._no_wheel(c, version, tags[0])
        for req in self._pins(c.package, wheel):
            pinned = Version(next(iter(req.specifier)).version)
            if self._wheel(req.name, pinned, tags) is None:
                return spec, (f"{c.package} {c.ref} requires {req}, which the nightly index ({redact_url(self.url)}) "
                              f"does not hold for {tags[0]}")
        pins: dict[str, str] = {}
        for req, exact in spec.companion_requirements():
            name = canonicalize_name(Requirement(req).name)
            if name not in FAMILY or exact:
                continue
            found = self._same_day(name, version, tags)
            if found is None:
                return spec, (f"no {name} nightly of {nightly_day(version)} for the +{version.local} build on the "
                              f"nightly index ({redact_url(self.url)}): {c.package} {c.ref} needs that day's")
            pins[name] = f"=={found}"
        if not pins:
            return spec, None
        extra = [u for u in spec.extra_index_urls if u != self.url] + [self.url]
        return spec.over(pins).model_copy(update={"extra_index_urls": extra}), None

    def _no_wheel(self, c: Candidate, version: Version, tag: Tag) -> str:
        """Why a day has no wheel for this build and interpreter: what the index holds of that day instead."""
        day, held = nightly_day(version), set()
        for entry in (self._page(c.package) or {}).get("files", []):
            try:
                _, found, _, _ = parse_wheel_filename(entry.get("filename", ""))
            except Exception:
                continue
            if nightly_day(found) == day:
                held.add("other Pythons or platforms" if found == version else f"+{found.local or ''}")
        said = f"; that day it holds {', '.join(sorted(held))}" if held else "; it holds nothing of that day (any more)"
        return f"no {c.package} {c.ref} wheel for {tag} on the nightly index ({redact_url(self.url)}){said}"

    def _pins(self, package: str, wheel: dict) -> list[Requirement]:
        """The exact ``==`` pins among the wheel's requirements that apply here (from its PEP 658 metadata;
        none known when the index offers no metadata file)."""
        if not (wheel.get("core-metadata") or wheel.get("dist-info-metadata")):
            return []
        data = read_small(urllib.parse.urljoin(project_url(self.url, package), wheel.get("url", "")) + ".metadata")
        if data is None:
            return []
        out = []
        for req in parse_metadata(data, "index metadata file").requirements():
            specs = list(req.specifier)
            exact = len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version
            if exact and applies(req):
                out.append(req)
        return out

    def _same_day(self, name: str, torch: Version, tags: list[Tag]) -> Optional[str]:
        """The version of ``name``'s nightly of torch's day and build, installable here (newest first)."""
        day, wanted = nightly_day(torch), set(tags)
        found = []
        for entry in (self._page(name) or {}).get("files", []):
            try:
                _, version, _, file_tags = parse_wheel_filename(entry.get("filename", ""))
            except Exception:
                continue
            if nightly_day(version) == day and version.local == torch.local and wanted & set(file_tags):
                found.append(version)
        return str(max(found)) if found else None

