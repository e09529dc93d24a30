"""A candidate: one release, one nightly or one commit of the package under test."""
from __future__ import annotations

import datetime as dt
import enum
from typing import Optional

from pydantic import BaseModel, ConfigDict


class CandidateKind(enum.StrEnum):
    """Where a candidate comes from."""

    RELEASE = "release"
    NIGHTLY = "nightly"    # a dated dev build from a nightly index (torch's), e.g. 2.14.0.dev20261001+cpu
    COMMIT = "commit"


class Candidate(BaseModel):
    """One point of the searched range.

    For a release, ``ref`` is the normalised version ("0.22.0") and ``date`` its upload time.
    For a nightly, ``ref`` is its full version, local label kept ("2.14.0.dev20261001+cpu": the label is
    the build), and ``date`` its upload time (else its day, from the dev number).
    For a commit, ``ref`` is the full SHA, ``date`` the committer date, and ``source`` a path
    to a directory (or wheel) holding exactly that commit's tree, filled in when it is built.
    ``revert`` (commits only): the SHA of another commit whose change is reverted on top of this one
    (the culprit's confirmation by revert); its environment is that reverted tree.
    """

    model_config = ConfigDict(frozen=True)

    package: str
    kind: CandidateKind
    ref: str
    date: Optional[dt.datetime] = None
    subject: Optional[str] = None
    author: Optional[str] = None
    pr: Optional[int] = None
    repo_url: Optional[str] = None
    revert: Optional[str] = None

    @property
    def short(self) -> str:
        """Short label for logs: the version, or the first 10 characters of the SHA (and the reverted one's)."""
        if self.kind is not CandidateKind.COMMIT:
            return self.ref
        return self.ref[:10] + (f"-revert-{self.revert[:10]}" if self.revert else "")

    @property
    def requirement(self) -> str:
        """The PEP 508 requirement that installs a release candidate."""
        return f"{self.package}=={self.ref}"
