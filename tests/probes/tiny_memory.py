"""A custom metrics probe for the tiny test package: peak Python heap of one step() (tracemalloc).

TINY_PROBE_SLEEP (seconds) makes each run slower, so a test can kill a bisect mid-way.
"""
import json
import os
import time
import tracemalloc

import tinypkg

time.sleep(float(os.environ.get("TINY_PROBE_SLEEP", "0")))
tracemalloc.start()
tinypkg.step()
_, peak = tracemalloc.get_traced_memory()
with open(os.environ["BISECTOR_RESULT"], "w") as fh:
    json.dump({"metrics": {"peak_bytes": float(peak), "buffer_kib": float(tinypkg.BUFFER_KIB)}}, fh)
