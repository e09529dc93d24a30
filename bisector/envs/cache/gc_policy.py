"""Which cached environments to remove: keep the most recently used, within a size budget."""
from __future__ import annotations

from typing import Optional

from bisector.envs.model.info import EnvInfo


def select_for_removal(infos: list[EnvInfo], keep_last: Optional[int] = None,
                       max_size: Optional[int] = None) -> list[EnvInfo]:
    """Envs to remove, least recently used first.

    ``keep_last``: keep at most that many (the most recently used). ``max_size``: keep the
    most recently used ones whose ``size_bytes`` add up to at most that many bytes. Both
    limits apply together; with neither, nothing is removed.
    """
    ordered = sorted(infos, key=lambda i: i.last_used, reverse=True)
    keep = ordered if keep_last is None else ordered[: max(keep_last, 0)]
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
