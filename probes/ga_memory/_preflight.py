"""Run by bisector before a run starts, with its own interpreter and the standard library only:
the probe's arguments parsed as the probe parses them (``--device auto`` is ``$BISECTOR_DEVICE``),
and a setting refused when this machine cannot hold its floor (``_models/budget.py``). Exit 0: fine;
otherwise one line on stderr saying why."""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (os.path.dirname(_HERE), _HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from _models.budget import available_memory, floor_problem  # noqa: E402
from _cli import make_spec, parser  # noqa: E402


def main(argv) -> int:
    spec = make_spec(parser().parse_args(argv))   # argparse and the spec's checks exit with their message
    available = available_memory() if spec["device"] == "cpu" and not spec.get("fake") else None  # fake: no memory
    problem = floor_problem(spec, available) if available else None
    if problem:
        print(problem, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
