"""bisector: find the release or commit of an ML library that made a training step use more memory,
run slower, or break — with a report an upstream maintainer accepts at a glance."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from bisector.bisection.driver import Handler
from bisector.bisection.wiring import bisector_for
from bisector.core.changes import Attribution, AttributionKind, Change, Confirmation, ConfirmationStatus, Trial
from bisector.core.result import BisectResult
from bisector.core.verdict import Verdict
from bisector.difference.diff_job import DiffInput, check
from bisector.difference.diff_model import DiffResult, DiffStatus
from bisector.difference.diff_run import run_diff
from bisector.job.config import RunSection
from bisector.job.jobfile import load_config
from bisector.paths import default_store_path
from bisector.sources.index import pages_read_once
from bisector.store.storage import Store
from bisector.data import VERSION

__version__ = VERSION
__all__ = ["bisect", "diff", "Attribution", "AttributionKind", "BisectResult", "Change", "Confirmation",
           "ConfirmationStatus", "DiffResult", "DiffStatus", "Trial", "Verdict", "__version__"]


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


def diff(package: Optional[str] = None, version: Optional[str] = None, *, pins: Iterable[str] = (),
         a_pins: Iterable[str] = (), b_pins: Iterable[str] = (), a_lock: Optional[Path] = None,
         b_lock: Optional[Path] = None, a_args: Iterable[str] = (), b_args: Iterable[str] = (),
         probe: Optional[dict] = None, criterion: Optional[dict] = None, env: Optional[str] = None,
         index_url: Optional[str] = None, store: Optional[Path] = None, cache_dir: Optional[Path] = None,
         follow: bool = False, handler=None) -> DiffResult:
    """Compare two setups at one version and return the typed :class:`DiffResult` (``bisector diff``).

    ``package`` and ``version`` name what is measured (or ``pins``' first entry does); ``a_*`` / ``b_*``
    are each side's pins, lock file and probe arguments, e.g.
    ``diff("accelerate", "0.22.0", a_args=["--loop=trainer"], b_args=["--loop=accelerate"])``.
    ``criterion`` is a partial [criterion] table (default: the probe's metric, midway between A and B).
    """
    first = [f"{package}=={version}"] if package and version else []
    given = DiffInput(package=package if not version else None, pins=[*first, *pins], a_pins=a_pins, b_pins=b_pins,
                      a_lock=a_lock, b_lock=b_lock, a_args=a_args, b_args=b_args, probe=dict(probe or {}),
                      criterion=dict(criterion or {}), env=env, index_url=index_url, follow=follow)
    with pages_read_once():
        checked = check(given)
        db = Store(store or default_store_path())
        try:
            return run_diff(checked, db, RunSection(cache_dir=cache_dir), handler=handler)
        finally:
            db.close()
