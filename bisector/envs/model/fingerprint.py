"""Content addresses of environments: a hash of every input that decides the resolved set."""
from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any

from bisector.envs.model.info import SCHEMA

# Installer settings from the environment that change what an unpinned name resolves to.
INDEX_VARS = (
    "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_FIND_LINKS",
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS",
)


def digest(data: Any, length: int = 16) -> str:
    """Short sha256 hex of a JSON-able value (keys sorted)."""
    text = json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def index_environment() -> dict[str, str]:
    """The index-related installer variables that are set."""
    return {k: os.environ[k] for k in INDEX_VARS if os.environ.get(k)}


def env_fingerprint(inputs: dict[str, Any]) -> str:
    """Fingerprint of an env from its resolution inputs (plus layout schema and index vars)."""
    return digest({"schema": SCHEMA, "inputs": inputs, "index_env": index_environment()})


def dir_name(package: str, ref: str, fingerprint: str) -> str:
    """Readable, unique env dir name: ``<package>-<ref>-<fingerprint>``."""
    safe = re.sub(r"[^A-Za-z0-9._+-]", "_", f"{package}-{ref}")
    return f"{safe}-{fingerprint}"
