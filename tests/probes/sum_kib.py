"""A custom metrics probe for diffs: ``kib`` is the sum of ``KIB`` over the modules named by
``--modules=a,b,c`` (a missing one counts 0); any other argument is accepted and ignored. It reports
the device it was told to use, and with $GPU_SEEN_LOG set appends that device and its
CUDA_VISIBLE_DEVICES to that file (one JSON line a run)."""
import importlib
import json
import os
import sys

names = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--modules=")), "")
kib = 0.0
for name in filter(None, names.split(",")):
    try:
        kib += float(getattr(importlib.import_module(name), "KIB", 0))
    except ImportError:
        pass
device = os.environ.get("BISECTOR_DEVICE", "cpu")
if os.environ.get("GPU_SEEN_LOG"):
    with open(os.environ["GPU_SEEN_LOG"], "a") as fh:
        fh.write(json.dumps({"device": device, "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")}) + "\n")
with open(os.environ["BISECTOR_RESULT"], "w") as fh:
    json.dump({"metrics": {"kib": kib}, "device": {"type": device}}, fh)
