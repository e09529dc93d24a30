"""A timed probe with seeded noise: sleeps ``base * tinypkg.SLOWDOWN * (1 + noise)`` and reports how long
the sleep took (``step_seconds``). The noise is uniform in +-``--noise`` (default 25%), drawn from
``random.Random(f"{seed}:{candidate}:{n}")`` where ``n`` counts this candidate's runs in ``--state``
(so each seed gives one fixed sequence per candidate), and ``--seed`` is a probe argument: it is part
of the probe's fingerprint, so every seed takes fresh measurements.
"""
import argparse
import json
import os
import random
import time
from pathlib import Path

import tinypkg

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--base", type=float, default=0.03)
parser.add_argument("--noise", type=float, default=0.25)
parser.add_argument("--state", type=Path, required=True)
args = parser.parse_args()

candidate = os.environ.get("BISECTOR_CANDIDATE", "unknown")
counter = args.state / f"{args.seed}-{candidate}.count"
args.state.mkdir(parents=True, exist_ok=True)
n = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(n + 1))
noise = random.Random(f"{args.seed}:{candidate}:{n}").uniform(-args.noise, args.noise)
start = time.perf_counter()
time.sleep(args.base * tinypkg.SLOWDOWN * (1 + noise))
took = time.perf_counter() - start
with open(os.environ["BISECTOR_RESULT"], "w") as fh:
    json.dump({"metrics": {"step_seconds": took}}, fh)
