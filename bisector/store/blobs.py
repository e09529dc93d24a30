"""Large per-cell data kept once: a probe result's bulky fields (a ga_memory result's ``cells`` are about
100 KiB) are stored by content hash in the ``blobs`` table and referenced from each measurement that
carries them, so the repeats of a candidate whose cells came out the same (memory is deterministic)
store them once. Reading a measurement puts them back: callers never see a reference."""
from __future__ import annotations

import hashlib
import json
import sqlite3
from typing import Any, Callable

BLOB_MIN_BYTES = 16 << 10   # a result field this large (as JSON) is kept once, by its hash
REF = "$blob"

Clean = Callable[[Any], str]   # a value -> its JSON text as stored (the redaction pass)


def externalized(db: sqlite3.Connection, details: dict[str, Any], clean: Clean) -> dict[str, Any]:
    """``details`` with each large field of its probe ``result`` stored in ``blobs`` (inside the caller's
    transaction, through ``clean``: the redaction pass) and replaced by ``{"$blob": hash}``."""
    result = details.get("result")
    if not isinstance(result, dict):
        return details
    kept = dict(result)
    for name, value in result.items():
        text = json.dumps(value)
        if len(text) < BLOB_MIN_BYTES:
            continue
        text = clean(value)
        digest = hashlib.sha256(text.encode()).hexdigest()[:32]
        db.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?)", (digest, text))
        kept[name] = {REF: digest}
    return {**details, "result": kept}


def hydrated(details: dict[str, Any], fetch: Callable[[str], str | None]) -> dict[str, Any]:
    """``details`` with every ``{"$blob": hash}`` of its result read back (``fetch``: hash -> JSON text)."""
    result = details.get("result")
    if not isinstance(result, dict) or not any(_is_ref(v) for v in result.values()):
        return details
    full = {}
    for name, value in result.items():
        text = fetch(value[REF]) if _is_ref(value) else None
        full[name] = json.loads(text) if text is not None else value
    return {**details, "result": full}


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(REF), str)
