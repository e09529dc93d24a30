"""Built-in probe: what importing the package costs (wall time, peak RSS growth, modules loaded).

Runs inside the candidate environment; stdlib only. The module to import is ``--module`` or the
distribution named by $BISECTOR_PACKAGE (its top-level import name is looked up in its metadata).
Writes ``{"metrics": {...}}`` to $BISECTOR_RESULT.
"""
import argparse
import importlib
import importlib.metadata as md
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the shared contract, even with -P
from _probe_contract import write_result  # noqa: E402

PROBE_VERSION = "1.0.0"


def import_name(dist: str) -> str:
    """The top-level module a distribution provides (``scikit-learn`` -> ``sklearn``)."""
    try:
        top = (md.distribution(dist).read_text("top_level.txt") or "").split()
    except md.PackageNotFoundError:
        top = []
    return top[0] if top else dist.replace("-", "_")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--module", default=None)
    args = parser.parse_args()
    module = args.module or import_name(os.environ.get("BISECTOR_PACKAGE", ""))
    before_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    before_mods = len(sys.modules)
    start = time.perf_counter()
    mod = importlib.import_module(module)
    seconds = time.perf_counter() - start
    result = {
        "schema_version": "import_cost/1",
        "probe": {"name": "import_cost", "version": PROBE_VERSION, "config": {"module": module}},
        "metrics": {
            "import_seconds": seconds,
            "import_rss_bytes": float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before_rss),
            "import_modules": float(len(sys.modules) - before_mods),
        },
        "versions": {"module": getattr(mod, "__version__", None), "python": sys.version.split()[0]},
    }
    write_result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
