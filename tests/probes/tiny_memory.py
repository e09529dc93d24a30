"""A custom metrics probe for the tiny test package: peak Python heap of one step() (tracemalloc)."""
import json
import os
import tracemalloc

import tinypkg

tracemalloc.start()
tinypkg.step()
_, peak = tracemalloc.get_traced_memory()
with open(os.environ["BISECTOR_RESULT"], "w") as fh:
    json.dump({"metrics": {"peak_bytes": float(peak), "buffer_kib": float(tinypkg.BUFFER_KIB)}}, fh)
