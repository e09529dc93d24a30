"""A timed probe with seeded noise: sleeps ``base * tinypkg.SLOWDOWN * (1 + noise)`` and reports that
planned duration (``step_seconds``), not the clock's reading. The host's wake-up latency is noise no
seed controls: on CI's two loaded cores (three bisects at once) it once turned one seed in twenty
"undecided", and a test that claims every seed must own its noise (the real probes time real steps;
bench/noisy.py measures the rates). The noise is uniform in +-``noise`` (default 25%), drawn from
``random.Random(f"{seed}:{candidate}:{n}")`` where ``n`` counts this candidate's runs in the ``state``
directory (so each seed gives one fixed sequence per candidate); ``seed`` is a probe argument, part of
the probe's fingerprint, so every seed takes fresh measurements.

Arguments ``--seed=N --base=SECONDS --noise=FRACTION --state=DIR`` (parsed by hand: argparse and
pathlib alone would double the probe's start-up time, which the 20-seed tests pay 5,000 times).
"""
import os
import random
import sys
import time

import tinypkg

args = {"seed": "0", "base": "0.03", "noise": "0.25", "state": ""}
for arg in sys.argv[1:]:
    key, _, value = arg.removeprefix("--").partition("=")
    args[key] = value
if not args["state"]:
    sys.exit("noisy_timer: --state=DIR is required")
candidate = os.environ.get("BISECTOR_CANDIDATE", "unknown")
os.makedirs(args["state"], exist_ok=True)
counter = os.path.join(args["state"], f"{args['seed']}-{candidate}.count")
n = int(open(counter).read()) if os.path.exists(counter) else 0
with open(counter, "w") as fh:
    fh.write(str(n + 1))
noise = random.Random(f"{args['seed']}:{candidate}:{n}").uniform(-float(args["noise"]), float(args["noise"]))
planned = float(args["base"]) * tinypkg.SLOWDOWN * (1 + noise)
time.sleep(planned)
with open(os.environ["BISECTOR_RESULT"], "w") as fh:
    fh.write('{"metrics": {"step_seconds": %r}}' % planned)  # by hand: importing json (and re) is a third of start-up
