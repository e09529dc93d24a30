"""bisector: find the release or commit of an ML library that made a training step use more memory,
run slower, or break — with a report an upstream maintainer accepts at a glance."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from .result import BisectResult
from .verdict import Verdict

__version__ = "0.1.0"
__all__ = ["bisect", "BisectResult", "Verdict", "__version__"]


def bisect(package: str, good: str, bad: str, *, config: Optional[Path] = None, store: Optional[Path] = None,
           cache_dir: Optional[Path] = None, handler: Any = None, **sections: dict) -> BisectResult:
    """Run a bisect from Python and return the typed result.

    ``sections`` are partial config tables (``job``, ``probe``, ``criterion``, ``run``), e.g.
    ``bisect("accelerate", "0.20.0", "0.22.0", probe={"name": "ga_memory"},
    criterion={"metric": "ga_excess_bytes_per_param", "threshold": 0.5})``.
    """
    from .config import load_config
    from .driver import Bisector
    from .paths import default_cache_dir, default_store_path
    from .store import Store

    overrides = {k: dict(v) for k, v in sections.items()}
    overrides["job"] = {**overrides.get("job", {}), "package": package, "good": good, "bad": bad}
    cfg = load_config(config, overrides)
    db = Store(store or cfg.run.store or default_store_path())
    try:
        runner = Bisector(cfg, db, cache_dir or cfg.run.cache_dir or default_cache_dir(), handler=handler)
        return runner.run()
    finally:
        db.close()
