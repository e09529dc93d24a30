"""A metrics probe that can be held mid-run: logs when and where it runs, then waits.

Arguments: LOG (a JSON line per run is appended: pid, parent pid, CUDA_VISIBLE_DEVICES, candidate,
start/end), GO (a path: wait until it exists; '-' for no wait), HOLD (seconds to sleep after).
Reports ``buffer_kib`` of the tiny test package, like tiny_memory.py.
"""
import json
import os
import sys
import time

import tinypkg

log, go, hold = sys.argv[1], sys.argv[2], float(sys.argv[3])
start = time.time()
fact = {"pid": os.getpid(), "ppid": os.getppid(), "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "candidate": os.environ.get("BISECTOR_CANDIDATE"), "start": start}
with open(log, "a") as fh:
    fh.write(json.dumps({**fact, "event": "start"}) + "\n")
deadline = start + 120
while go != "-" and not os.path.exists(go) and time.time() < deadline:
    time.sleep(0.05)
time.sleep(hold)
with open(log, "a") as fh:
    fh.write(json.dumps({**fact, "event": "end", "end": time.time()}) + "\n")
with open(os.environ["BISECTOR_RESULT"], "w") as fh:
    json.dump({"metrics": {"buffer_kib": float(tinypkg.BUFFER_KIB)}}, fh)
