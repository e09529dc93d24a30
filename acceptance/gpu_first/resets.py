"""Step resets (planned 15 s on a GPU): ``--cuda-reset window`` against per-phase resets (the meter
step's run, the default) on the same cells: the flag reached the meter (each cell says its mode, and
only in window mode is every phase peak the running maximum), and both give the same step peak."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gf  # noqa: E402
import verdicts  # noqa: E402
from meter import CELLS  # noqa: E402

# inner timeouts, s, in the order they run (with the runner's reserve they fit the cap in run.sh)
TIMEOUTS = {"window": 140}


def main():
    step = gf.Step("resets")
    code, window = step.probe("window", *gf.widths(step, 1024, 2048), *CELLS, "--cuda-reset", "window",
                              timeout=TIMEOUTS["window"])
    step.check("resets.measured", verdicts.all_measured(code, window))
    step.cuda_only("resets.modes", lambda: verdicts.resets(gf.result("meter", "probe"), window, code))
    return step.done()


if __name__ == "__main__":
    sys.exit(main())
