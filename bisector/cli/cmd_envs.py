"""``bisector envs list|gc``: the environment cache (environments and torch bases), listed or
garbage-collected."""
from __future__ import annotations

import datetime as dt
import re
import sys

from bisector.core.units import human_bytes
from bisector.envs import EnvCache
from bisector.envs import read_marker
from bisector.errors import cut, UsageError
from bisector.paths import default_cache_dir

_SIZE = re.compile(r"^\s*(\d{1,15}(?:\.\d{1,15})?)\s*([KMGT]?)i?B?\s*$", re.I)   # bounded: no 5000-digit number
_AGE = re.compile(r"^\s*(\d{1,15}(?:\.\d{1,15})?)\s*([smhdw]?)\s*$", re.I)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_size(text: str, flag: str = "--max-size") -> int:
    """'2G', '500M', '1.5GiB', '1000' -> bytes."""
    m = _SIZE.match(text or "")
    if not m:
        raise UsageError(f"{flag} {cut(text)!r} is not a size like 500M or 2G")
    power = " KMGT".index(m.group(2).upper() or " ")
    return int(float(m.group(1)) * 1024 ** power)


def parse_age(text: str) -> float:
    """'14d', '12h', '30m', '2w', '90s' (a bare number: days) -> seconds."""
    m = _AGE.match(text or "")
    if not m:
        raise UsageError(f"--older-than {cut(text)!r} is not an age like 14d, 12h or 2w")
    return float(m.group(1)) * _SECONDS[(m.group(2) or "d").lower()]


def _list(manager: EnvCache) -> int:
    envs = manager.list()
    print(f"{'environment':<16}  {'package':<44} {'disk':>10}  last used")
    for info in envs:
        rev = f" @{info.installed_revision[:12]}" if info.installed_revision else ""
        label = f"{info.target.package}=={info.installed_version or '?'}{rev}"
        busy = "  in use" if manager.in_use(info.fingerprint) else ""
        print(f"{info.fingerprint[:16]}  {label:<44} {human_bytes(info.size_bytes or 0):>10}  "
              f"{info.last_used:%Y-%m-%d %H:%M}{busy}")
    bases = manager.bases()
    for base in bases:
        marker = read_marker(base.prefix)
        version = marker.torch if marker else base.prefix.name.split("-")[1]
        shared = f", {human_bytes(marker.shared_bytes)} shared with other bases" if marker and marker.shared_bytes else ""
        used = dt.datetime.fromtimestamp(base.last_used, dt.timezone.utc)
        print(f"{'base':<16}  {'torch==' + version:<44} {human_bytes(base.size_bytes):>10}  {used:%Y-%m-%d %H:%M}  "
              f"used by {base.users} environment(s){shared}  {base.prefix}")
    total = sum(i.size_bytes or 0 for i in envs) + sum(b.size_bytes for b in bases)
    print(f"{len(envs)} environment(s), {len(bases)} torch base(s), {human_bytes(total)} on disk")
    return 0


def envs_command(args) -> int:
    """``envs list`` (environments and torch bases) or ``envs gc`` (what no run uses, what is old, what
    is beyond the size limits); a cache directory that does not exist is an empty cache (and is not
    created)."""
    root = (args.cache_dir or default_cache_dir()).expanduser()
    if root.exists() and not root.is_dir():
        raise UsageError(f"cache directory {root} is not a directory")
    if args.action == "list":
        if not root.is_dir():
            print(f"no environments (no cache directory at {root})", file=sys.stderr)
            return 0
        return _list(EnvCache(root))
    if args.keep_last is None and args.max_size is None and args.older_than is None and args.bases_max_size is None:
        raise UsageError("envs gc needs --keep-last N, --max-size SIZE, --older-than AGE and/or --bases-max-size SIZE")
    if args.keep_last is not None and args.keep_last < 0:
        raise UsageError("--keep-last must be >= 0")
    max_size = parse_size(args.max_size) if args.max_size else None
    bases_max = parse_size(args.bases_max_size, "--bases-max-size") if args.bases_max_size else None
    older = parse_age(args.older_than) if args.older_than else None
    if not root.is_dir():
        print(f"removed 0 environment(s) (no cache directory at {root})")
        return 0
    manager = EnvCache(root)
    removed = manager.gc(keep_last=args.keep_last, max_size=max_size, older_than_s=older)
    bases, over = manager.gc_bases(older_than_s=older, max_size=bases_max)
    busy = sum(manager.in_use(info.fingerprint) for info in manager.list())
    kept = f"; kept {busy} in use by a running probe" if busy else ""
    gone = f" and {len(bases)} torch base(s)" if bases else ""
    print(f"removed {len(removed) + len(over)} environment(s){gone}{kept}")
    return 0
