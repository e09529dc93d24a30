"""A probe that can never be judged: it writes an error and no metrics (every run a SKIP)."""
import json
import os

with open(os.environ["BISECTOR_RESULT"], "w") as fh:
    json.dump({"metrics": {}, "error": "this probe cannot measure anything here"}, fh)
