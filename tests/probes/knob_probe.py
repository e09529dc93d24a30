"""A custom probe with loops and knobs, shaped like ga_memory's: ``--loop simple|framework`` implies the
knobs ``buffer``, ``color`` and ``cache``; each can be set with ``--<knob>=<value>``, except that the
framework loop decides ``buffer`` itself (setting it there is an error, as Trainer's zero_grad is).
Only ``buffer`` moves the metric: ``kib`` is 400 with a big buffer, 100 with a small one."""
import argparse
import json
import os
import sys

LOOPS = {"simple": {"buffer": "small", "color": "red", "cache": "off"},
         "framework": {"buffer": "big", "color": "blue", "cache": "on"}}
p = argparse.ArgumentParser()
p.add_argument("--loop", choices=sorted(LOOPS), default="simple")
for knob in ("buffer", "color", "cache"):
    p.add_argument(f"--{knob}")
args, _ = p.parse_known_args()
implied = LOOPS[args.loop]
given = {k: getattr(args, k) for k in implied if getattr(args, k) is not None}
if args.loop == "framework" and given.get("buffer", "big") != "big":
    sys.exit("--buffer is decided by the framework loop itself")
knobs = {**implied, **given}
kib = 400.0 if knobs["buffer"] == "big" else 100.0
result = {"metrics": {"kib": kib},
          "knobs": {"loop": args.loop, **knobs, "implied_by_loop": sorted(k for k in implied if k not in given)}}
with open(os.environ["BISECTOR_RESULT"], "w") as fh:
    json.dump(result, fh)
