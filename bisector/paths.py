"""Default locations: the user cache dir, overridable by BISECTOR_CACHE_DIR."""
from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def default_cache_dir() -> Path:
    return Path(os.environ.get("BISECTOR_CACHE_DIR") or platformdirs.user_cache_dir("bisector"))


def default_store_path() -> Path:
    return Path(os.environ.get("BISECTOR_STORE") or default_cache_dir() / "store.sqlite")
