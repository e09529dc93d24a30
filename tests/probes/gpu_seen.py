"""Reports which GPU and device the probe was given, and when it ran (appended to $GPU_SEEN_LOG)."""
import json
import os
import time

start = time.time()
time.sleep(0.3)  # long enough for the probes of one k-way round to overlap
seen = os.environ.get("CUDA_VISIBLE_DEVICES", "-1")
with open(os.environ["GPU_SEEN_LOG"], "a") as fh:
    fh.write(json.dumps({"gpu": seen, "device": os.environ.get("BISECTOR_DEVICE"), "start": start,
                         "end": time.time()}) + "\n")
with open(os.environ["BISECTOR_RESULT"], "w") as fh:
    json.dump({"metrics": {"gpu": float(seen) if "," not in seen else -2.0}}, fh)
