"""Step oom (planned 25 s on a GPU): a memory cap (``--cuda-memory-fraction``) below every cell
(nothing measured, exit 3, every cell in ``oom_cells``), and one between the meter step's two widths'
reserved peaks (exactly the larger width's cells out of memory, the others measured, exit 0): half
the gap between them on either side, the gap and its margin kept in the ``partial_cap`` fact; with the
meter step's result partial, absent or without a measured cell that check is SKIP with the reason."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gf  # noqa: E402
import verdicts  # noqa: E402
from meter import CELLS  # noqa: E402

# inner timeouts, s, in the order they run (with the runner's reserve they fit the cap in run.sh)
TIMEOUTS = {"whole": 70, "partial": 100}


def whole(step):
    code, result = step.probe("whole", *gf.widths(step, 1024), "--precisions", "fp32", "--ga", "1,2",
                              "--isolate", "off", "--cuda-memory-fraction", "0.000001", timeout=TIMEOUTS["whole"])
    return verdicts.whole_oom(code, result)


def partial(step):
    meter = gf.result("meter", "probe")
    fraction, expected, gap = verdicts.partial_cap(meter)
    if fraction is None:
        why = verdicts.gap(meter)
        return verdicts.skip(f"the meter step's result is {why}: {expected}") if why else verdicts.fail(expected)
    step.fact("partial_cap", {"fraction": fraction, "expected_oom": expected, **gap})
    code, result = step.probe("partial", *gf.widths(step, 1024, 2048), *CELLS,
                              "--cuda-memory-fraction", f"{fraction:.6f}", timeout=TIMEOUTS["partial"])
    return verdicts.partial_oom(code, result, expected)


def main():
    step = gf.Step("oom")
    step.cuda_only("oom.whole", lambda: whole(step))
    step.cuda_only("oom.partial", lambda: partial(step))
    return step.done()


if __name__ == "__main__":
    sys.exit(main())
