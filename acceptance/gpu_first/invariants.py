"""Step invariants (planned 45 s on a GPU): the probe as a bisect runs it on a GPU (one fresh
interpreter per cell), at the meter step's larger width. Per cell: requested <= allocated <=
reserved, and NVML's device-wide used >= reserved; and the same allocated peaks as in one process
(the meter step's run; where that is partial, absent or measured nothing, SKIP with the reason)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gf  # noqa: E402
import verdicts  # noqa: E402

# inner timeouts, s, in the order they run (with the runner's reserve they fit the cap in run.sh)
TIMEOUTS = {"isolated": 140}
CELL_TIMEOUT_S = 60   # each isolated cell's interpreter (the probe's --cell-timeout)


def main():
    step = gf.Step("invariants")
    ga = "1,2" if step.cuda else "2"  # the dry run: two interpreters, not four
    args = gf.widths(step, 2048) + ["--precisions", "fp32,bf16", "--ga", ga, "--isolate", "on", "--no-attribution",
                                    "--cell-timeout", str(CELL_TIMEOUT_S)]
    code, result = step.probe("isolated", *args, timeout=TIMEOUTS["isolated"])
    step.check("invariants.measured", verdicts.all_measured(code, result))
    step.cuda_only("invariants.per_cell", lambda: verdicts.invariants(result, code))
    step.check("invariants.same_peaks",
               verdicts.same_peaks(result, gf.result("meter", "probe"), "isolated vs the meter step's run", code))
    return step.done()


if __name__ == "__main__":
    sys.exit(main())
