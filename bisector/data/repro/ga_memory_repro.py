#!/usr/bin/env python3
# >>> header
# A standalone reproduction of the ga_memory probe's measurement (bisector writes the run's own header
# here: what it reproduces, both sides' pins and install lines).
# <<<
"""Peak memory of one training step with gradient accumulation, fp32 against mixed precision, measured by
bisector's ga_memory probe itself, as the bisect ran it.

FILES, at the end of this script, holds the probe's own files exactly as the bisect ran them: the probe
(ga_memory/), the probes' meter library (_meters/) and the result contract. This script writes them to a
temporary directory and runs the probe with the bisect's arguments (ARGS) on DEVICE. For every width,
precision and GA the probe builds a causal LM from a transformers config with random weights (nothing is
downloaded), runs a warm-up optimizer step, then one measured step under its memory meter, proves the
precision the step ran in, fits the peaks over the models' parameter counts (``peak = a * params + b``)
and computes METRIC from the fits:

    GA cost        = peak(GA=max) - peak(GA=min) in the mixed precision (fp32_ga_cost: in fp32)
    mixed cost     = peak(mixed, GA=min) - peak(fp32, GA=min)
    GA excess      = GA cost - fp32 GA cost   (what GA costs in mixed precision beyond fp32)

Needs only torch, transformers and accelerate. The probe prints every cell's peak (stderr); this script
prints METRIC with its verdict (stdout) and exits 0 when GOOD, 1 when BAD by THRESHOLD (125 when METRIC was
not measured, or measured in another setting than the bisect's), so ``git bisect run python this.py`` works
too. Run by bisector (``$BISECTOR_RESULT`` set), the probe's result goes there and bisector judges it.
"""
import base64  # noqa: F401 (the embedded files below may be written from base64)
import json
import os
import subprocess
import sys
import tempfile
import types

USAGE = ""   # (no arguments: the bisect's probe with the bisect's arguments)
# >>> settings
ARGS = ["--loop=trainer"]
DEVICE = "cpu"
METRIC, THRESHOLD, DIRECTION = "ga_excess_bytes_per_param", 0.5, "increase"
BISECT_SETTINGS = {"loop": "trainer", "device": "cpu"}   # the bisect's effective settings, as its results said
# <<<


def run_probe(tmp, env):
    """The probe's files written under ``tmp``, the probe run with ARGS; its result (None: it wrote none)."""
    write_files(tmp, FILES)
    code = subprocess.call([sys.executable, os.path.join(tmp, "ga_memory", "__main__.py"), *ARGS], env=env,
                           stdout=sys.stderr)   # stdout is the verdict's
    try:
        with open(env["BISECTOR_RESULT"]) as fh:
            return code, json.load(fh)
    except (OSError, ValueError):
        return code, None


def main(argv):
    arguments(argv)
    with tempfile.TemporaryDirectory(prefix="ga-memory-repro-") as tmp:
        env = dict(os.environ)
        env.setdefault("BISECTOR_DEVICE", DEVICE)
        result = env.setdefault("BISECTOR_RESULT", os.path.join(tmp, "result.json"))
        by_bisector = not result.startswith(tmp)
        code, found = run_probe(tmp, env)
    if found is None or not found.get("metrics"):
        why = (found or {}).get("error") or f"the probe exited {code} and wrote no result"
        print(f"not measured: {why}", file=sys.stderr)
        return 125
    ran = (found.get("probe") or {}).get("config") or {}
    other = {k: (ran.get(k), v) for k, v in BISECT_SETTINGS.items() if ran.get(k) != v}
    if other:
        print("measured in another setting than the bisect's, not judged: " + ", ".join(
            f"{k} {a!r} (the bisect: {b!r})" for k, (a, b) in other.items()), file=sys.stderr)
        return 125
    versions = found.get("versions") or {}
    print(f"torch {versions.get('torch')}, transformers {versions.get('transformers')}, accelerate "
          f"{versions.get('accelerate')}; {ran.get('loop')} loop on {ran.get('device')}, meter {found.get('meter')}",
          file=sys.stderr)
    value = found["metrics"].get(METRIC)
    if value is None:
        print(f"{METRIC} not measured: {found.get('error') or 'the probe computes no such metric here'}",
              file=sys.stderr)
        return 125
    bad = judged(value)
    return 1 if bad and not by_bisector else 0   # run by bisector, it judges the result file


# >>> common
# <<<


# >>> units
UNITS, DECLARED_UNITS = "", {}   # bisector's unit formatting (bisector/core/units.py), the probe's declared units
# <<<


# >>> files
FILES = {}   # the probe's files, relative path -> source (bisector writes them here)
# <<<


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
