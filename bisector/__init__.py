"""bisector: find the release or commit of an ML library that made a training step use more memory,
run slower, or break — with a report an upstream maintainer accepts at a glance."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from bisector.bisection.driver import Handler
from bisector.bisection.job import bisector_for
from bisector.jobfile import load_config
from bisector.core.result import BisectResult
from bisector.core.verdict import Verdict
from bisector.paths import default_store_path
from bisector.storage import Store

__version__ = "0.1.0"
__all__ = ["bisect", "BisectResult", "Verdict", "__version__"]


def bisect(package: str, good: str, bad: str, *, config: Optional[Path] = None, store: Optional[Path] = None,
           cache_dir: Optional[Path] = None, handler: Optional[Handler] = None, **sections: dict) -> BisectResult:
    """Run a bisect from Python and return the typed result.

    ``sections`` are partial config tables (``job``, ``probe``, ``criterion``, ``run``), e.g.
    ``bisect("accelerate", "0.20.0", "0.22.0", probe={"name": "ga_memory"},
    criterion={"metric": "ga_excess_bytes_per_param", "threshold": 0.5})``.
    """
    overrides = {k: dict(v) for k, v in sections.items()}
    overrides["job"] = {**overrides.get("job", {}), "package": package, "good": good, "bad": bad}
    if cache_dir is not None:
        overrides["run"] = {**overrides.get("run", {}), "cache_dir": cache_dir}
    cfg = load_config(config, overrides)
    db = Store(store or cfg.run.store or default_store_path())
    try:
        return bisector_for(cfg, db, handler=handler).run()
    finally:
        db.close()
