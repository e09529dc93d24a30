"""EnvCache, the administration of the environment cache: what is there, what is in use, what goes.

``envs gc`` never removes an environment that a run in any process is building (its build lock)
or probing in (its in-use mark, see bisector.envs.cache.inuse); torch bases go only when no environment
refers to them and none was used for a while.
"""
from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Optional

from filelock import FileLock, Timeout

from bisector.envs.tooling.base_info import described_prefixes
from bisector.envs.tooling.fsops import discard, disk_usage, sweep
from bisector.envs.cache.gc_policy import BaseUse, select_bases, select_for_removal
from bisector.envs.model.info import EnvInfo, read_info
from bisector.envs.cache.inuse import is_in_use, unused
from bisector.envs.model.layout import CacheLayout
from bisector.envs.builders.torch_venv import last_used, remove_base, torch_bases

STALE_TMP_S = 6 * 3600
BASE_GRACE_S = 3600


class EnvCache:
    """Lists and garbage-collects the environments and torch bases in the cache rooted at ``cache_dir``."""

    def __init__(self, cache_dir: Path):
        self.layout = CacheLayout(Path(cache_dir).expanduser().resolve()).create()

    def list(self) -> list[EnvInfo]:
        """Info of every ready env, most recently used first."""
        infos = [i for d in sorted(self.layout.envs.iterdir()) if (i := read_info(d))]
        return sorted(infos, key=lambda i: i.last_used, reverse=True)

    def in_use(self, fingerprint: str) -> bool:
        """Whether a process is using the environment with this fingerprint right now."""
        return is_in_use(self.layout.use_lock(fingerprint))

    def gc(self, keep_last: Optional[int] = None, max_size: Optional[int] = None,
           older_than_s: Optional[float] = None) -> list[EnvInfo]:
        """Remove least recently used envs beyond ``keep_last`` / ``max_size`` bytes, and those not used
        for ``older_than_s`` seconds; return them.

        Envs being built, or used by a probe, in any process are skipped. Leftover temp and trash
        dirs, env dirs without a valid info file and overlays no env uses (after a while) go too.
        """
        removed = [info for info in select_for_removal(self.list(), keep_last, max_size, older_than_s)
                   if self._remove_if_free(info.dir_name, info.fingerprint)]
        self._sweep()
        return removed

    def bases(self) -> list[BaseUse]:
        """The ``torch==X`` base venvs in the cache: last use, own disk, how many environments use each."""
        users = Counter(self._base_prefixes_in_use())
        return [BaseUse(prefix=prefix, last_used=last_used(prefix), size_bytes=disk_usage(prefix)[0],
                        users=users[prefix]) for prefix in torch_bases(self.layout)]

    def gc_bases(self, grace_s: float = BASE_GRACE_S, older_than_s: Optional[float] = None,
                 max_size: Optional[int] = None) -> tuple[list[Path], list[EnvInfo]]:
        """Remove the ``torch==X`` bases no environment uses and none used for ``grace_s`` seconds (a
        base is used just before its first environment exists), and with ``older_than_s`` / ``max_size``
        the old ones and those beyond that much disk, least recently used first, together with the
        environments over them. A base one of whose environments a probe is using stays. Returns the
        removed bases and environments."""
        prefixes = described_prefixes(self.layout)
        gone: list[Path] = []
        envs: list[EnvInfo] = []
        for base in select_bases(self.bases(), time.time(), grace_s, older_than_s, max_size):
            over = [i for i in self.list() if prefixes.get(i.base_fingerprint) == base.prefix]
            if any(self.in_use(i.fingerprint) for i in over):
                continue
            envs += [i for i in over if self._remove_if_free(i.dir_name, i.fingerprint)]
            if remove_base(self.layout, base.prefix):
                gone.append(base.prefix)
        return gone, envs

    def _base_prefixes_in_use(self) -> list[Path]:
        """The base prefix of every ready environment (one entry per environment)."""
        prefixes = described_prefixes(self.layout)
        return [prefixes[i.base_fingerprint] for i in self.list() if i.base_fingerprint in prefixes]

    def _remove_if_free(self, dir_name: str, fingerprint: str) -> bool:
        try:
            with FileLock(str(self.layout.lock(fingerprint)), timeout=0), \
                    unused(self.layout.use_lock(fingerprint)) as free:
                if free:
                    discard(self.layout.env_dir(dir_name), self.layout.trash)
                return free
        except Timeout:
            return False

    def _sweep(self) -> None:
        sweep(self.layout.trash, 0)
        sweep(self.layout.tmp, STALE_TMP_S)
        for env_dir in self.layout.envs.iterdir():
            if read_info(env_dir) is None:
                self._remove_if_free(env_dir.name, env_dir.name.rsplit("-", 1)[-1])
        used = {i.base_fingerprint for i in self.list()}
        overlays = self.layout.overlays
        for overlay in overlays.iterdir() if overlays.is_dir() else []:
            if overlay.name not in used and time.time() - overlay.stat().st_mtime > STALE_TMP_S:
                discard(overlay, self.layout.trash)
