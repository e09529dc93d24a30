"""Find a package's source repository in its installed metadata (for auto mode's commit refinement)."""
from __future__ import annotations

import email.parser
from pathlib import Path
from typing import Optional

from bisector.envs.model.info import read_info

PREFERRED = ("source", "source code", "repository", "code", "github", "homepage", "home")
SCHEMES = ("https://", "http://", "git://", "ssh://", "file://")


def repository_url(env_path: Path) -> Optional[str]:
    """The repository URL the candidate's METADATA names (Project-URL Source/Repository/..., Home-page)."""
    info = read_info(env_path)
    if info is None or not info.dist_info:
        return None
    try:
        meta = email.parser.Parser().parsestr((env_path / info.dist_info / "METADATA").read_text())
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
