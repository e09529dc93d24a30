"""What gc removes: environments (keep the most recently used, within a size budget) and torch bases
(unused, old, or beyond a size budget)."""
from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Optional

from pydantic import BaseModel

from bisector.envs.model.info import EnvInfo


def select_for_removal(infos: list[EnvInfo], keep_last: Optional[int] = None,
                       max_size: Optional[int] = None, older_than_s: Optional[float] = None,
                       now: Optional[dt.datetime] = None) -> list[EnvInfo]:
    """Envs to remove, least recently used first.

    ``keep_last``: keep at most that many (the most recently used). ``max_size``: keep the
    most recently used ones whose ``size_bytes`` add up to at most that many bytes.
    ``older_than_s``: remove those not used for that many seconds. The limits apply together;
    with none, nothing is removed.
    """
    ordered = sorted(infos, key=lambda i: i.last_used, reverse=True)
    keep = ordered if keep_last is None else ordered[: max(keep_last, 0)]
    if older_than_s is not None:
        moment = now or dt.datetime.now(dt.timezone.utc)
        keep = [i for i in keep if (moment - i.last_used).total_seconds() < older_than_s]
    if max_size is not None:
        kept, total = [], 0
        for info in keep:
            if total + info.size_bytes > max_size:
                break
            kept.append(info)
            total += info.size_bytes
        keep = kept
    kept_ids = {id(i) for i in keep}
    return [i for i in reversed(ordered) if id(i) not in kept_ids]


class BaseUse(BaseModel):
    """A torch base as gc sees it: where, when last used, its own disk, how many environments use it."""

    prefix: Path
    last_used: float
    size_bytes: int
    users: int


def select_bases(bases: list[BaseUse], now: float, grace_s: float, older_than_s: Optional[float] = None,
                 max_size: Optional[int] = None) -> list[BaseUse]:
    """Bases to remove, least recently used first: those no environment uses and none used for
    ``grace_s``; with ``older_than_s``, every base not used for that long (its environments go with it);
    with ``max_size``, the least recently used beyond the most recent ones whose own disk adds up to at
    most that many bytes."""
    ordered = sorted(bases, key=lambda b: b.last_used, reverse=True)
    doomed = {b.prefix for b in ordered if b.users == 0 and now - b.last_used >= grace_s}
    if older_than_s is not None:
        doomed |= {b.prefix for b in ordered if now - b.last_used >= older_than_s}
    if max_size is not None:
        total = 0
        for b in ordered:
            if b.prefix in doomed:
                continue
            total += b.size_bytes
            if total > max_size:
                doomed.add(b.prefix)
    return [b for b in reversed(ordered) if b.prefix in doomed]
