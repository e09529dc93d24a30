"""``bisector envs list|gc``: the environment cache, listed or garbage-collected."""
from __future__ import annotations

import re
import sys

from bisector.core.units import human_bytes
from bisector.envs import EnvCache
from bisector.envs.cache.fsops import disk_usage
from bisector.errors import UsageError
from bisector.paths import default_cache_dir

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.I)


def parse_size(text: str) -> int:
    """'2G', '500M', '1.5GiB', '1000' -> bytes."""
    m = _SIZE.match(text or "")
    if not m:
        raise UsageError(f"--max-size {text!r} is not a size like 500M or 2G")
    power = " KMGT".index(m.group(2).upper() or " ")
    return int(float(m.group(1)) * 1024 ** power)


def envs_command(args) -> int:
    """``envs list`` (environments and torch bases) or ``envs gc`` (what no run uses); a cache directory
    that does not exist is an empty cache (and is not created)."""
    if args.action == "gc" and args.keep_last is None and args.max_size is None:
        raise UsageError("envs gc needs --keep-last N and/or --max-size SIZE")
    if args.keep_last is not None and args.keep_last < 0:
        raise UsageError("--keep-last must be >= 0")
    max_size = parse_size(args.max_size) if args.max_size else None
    root = (args.cache_dir or default_cache_dir()).expanduser()
    if root.exists() and not root.is_dir():
        raise UsageError(f"cache directory {root} is not a directory")
    if not root.is_dir():
        print(f"no environments (no cache directory at {root})", file=sys.stderr)
        return 0
    manager = EnvCache(root)
    if args.action == "list":
        for info in manager.list():
            rev = f" @{info.installed_revision[:12]}" if info.installed_revision else ""
            label = f"{info.target.package}=={info.installed_version or '?'}{rev}"
            busy = "  in use" if manager.in_use(info.fingerprint) else ""
            print(f"{info.fingerprint[:16]}  {label:<44} {human_bytes(info.size_bytes or 0):>10}  "
                  f"last used {info.last_used:%Y-%m-%d %H:%M}{busy}")
        for prefix, users in manager.bases():
            version = prefix.name.split("-")[1]
            print(f"{'base':<16}  {'torch==' + version:<44} {human_bytes(disk_usage(prefix)[0]):>10}  "
                  f"used by {users} environment(s)  {prefix}")
        return 0
    removed = manager.gc(keep_last=args.keep_last, max_size=max_size)
    bases = manager.gc_bases()
    busy = sum(manager.in_use(info.fingerprint) for info in manager.list())
    kept = f"; kept {busy} in use by a running probe" if busy else ""
    gone = f" and {len(bases)} unused torch base(s)" if bases else ""
    print(f"removed {len(removed)} environment(s){gone}{kept}")
    return 0
