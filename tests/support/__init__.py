"""Helpers shared by the test suite: hand-built wheels and a loopback package index."""
from __future__ import annotations

from .pkgindex import LocalIndex, build_wheel

__all__ = ["LocalIndex", "build_wheel"]
