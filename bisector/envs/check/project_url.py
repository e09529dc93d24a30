"""Find a package's source repository in its installed metadata (read when a measurement uses the
environment: the report's compare link, auto mode's commit refinement)."""
from __future__ import annotations

import email.parser
from pathlib import Path
from typing import Optional

PREFERRED = ("source", "source code", "repository", "code", "github", "homepage", "home")
SCHEMES = ("https://", "http://", "git://", "ssh://", "file://")


def repository_url(env_path: Path, dist_info: str) -> Optional[str]:
    """The repository URL the candidate's METADATA (``dist_info`` in the environment at ``env_path``)
    names: Project-URL Source/Repository/..., Home-page."""
    if not dist_info:
        return None
    try:
        meta = email.parser.Parser().parsestr((env_path / dist_info / "METADATA").read_text())
    except OSError:
        return None
    labelled = {}
    for entry in meta.get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        labelled.setdefault(label.strip().lower(), url.strip())
    if meta.get("Home-page"):
        labelled.setdefault("home", meta["Home-page"].strip())
    for label in PREFERRED:
        url = labelled.get(label, "")
        if url.startswith(SCHEMES):
            return url.rstrip("/")
    return None
