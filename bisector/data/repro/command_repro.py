#!/usr/bin/env python3
# >>> header
# A standalone reproduction of a command run (bisector run ... -- COMMAND): bisector writes the run's own header
# here (what it reproduces, both sides' pins and install lines, the files it carries and those it cannot).
# <<<
"""Runs the bisect's command (COMMAND, below) unchanged under bisector's command meter, embedded below as
FILES (probes/command and the probes' meter library, as the bisect ran them), and judges METRIC.

    good/bin/python repro.py              # the bisect's command, in this script's directory
    good/bin/python repro.py -- CMD ...   # any other command, measured the same way, in the current one

The bisect's command runs in the directory this script is in: the files it names that the bisect could
carry (CARRIED: its scripts, configs and other small text files, secrets masked) are written there first,
each only where no file of that name is (one that is, is used as it is, and said if it differs); what it
could not carry (NOT_CARRIED: data files, directories, paths elsewhere, files over the bound) must be
put there by hand, as the header says. The command runs with this interpreter's ``bin`` first on ``PATH``
(so ``python``, ``torchrun`` and ``accelerate`` are this environment's); the script prints the metrics and
the per-step values, and exits 0 for GOOD and 1 for BAD by the run's criterion (125 when the metric could
not be measured: ``git bisect run``'s skip; a command that fails is BAD only where the run said so,
CRASH_IS_BAD, else 125 as the bisect skipped it). Run by bisector to verify it, the metrics go to
``$BISECTOR_RESULT`` too. A word of the command that held a secret is written masked (``***``): bisector
never writes one; give each back, whole as it was typed, in ``BISECTOR_SECRET_1``, ``_2``, ... (in the order
they appear), or the script says which it needs and stops (exit 2). Nothing in it imports bisector.
"""
import base64  # noqa: F401 (the embedded files below may be written from base64)
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import types

USAGE = " [-- COMMAND ...]"   # (no arguments: the bisect's command)
# >>> settings
COMMAND = ["python", "train.py"]   # the bisect's command, word for word
METER_ARGS = ["--measure-skip", "1", "--meter", "tensors"]
METRIC, THRESHOLD, DIRECTION = "step_peak_bytes", 1.0, "increase"
CRASH_IS_BAD = False   # the run's rule for a command that fails
ENV = {}   # what bisector told the command (set only where the environment does not say)
CARRIED = {}   # the files the command names that this script carries: path -> {"sha256", "mode", "source"}
NOT_CARRIED = []   # what else the command names: each with why it is not carried
# <<<


MASK = "***"   # a secret's place in a word (bisector never writes the secret)


def unmasked(command):
    """The command with each masked word given back from BISECTOR_SECRET_<n> (n: its order among them)."""
    out, missing, n = [], [], 0
    for word in command:
        if MASK in word:
            n += 1
            given = os.environ.get(f"BISECTOR_SECRET_{n}")
            if given is None:
                missing.append(f"BISECTOR_SECRET_{n} for {shown(word)}")
            word = word if given is None else given
        out.append(word)
    if missing:
        print(f"repro: the command held {n} secret(s), written masked: give each word as it was typed in "
              + ", ".join(missing), file=sys.stderr)
        sys.exit(2)
    return out


def carry(here):
    """The carried files written in ``here`` (each only where no file is; a different one there is said)."""
    for rel, entry in CARRIED.items():
        if os.path.isabs(rel) or ".." in rel.split("/"):
            fail(f"the carried {rel!r} is not a path inside this script's directory: this script was changed")
        source = entry["source"]
        data = source if isinstance(source, bytes) else source.encode("utf-8")
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            fail(f"the carried {rel!r} is not what its sha256 says: this script was changed")
        path = os.path.join(here, *rel.split("/"))
        if os.path.lexists(path):
            same = False
            if os.path.isfile(path):
                with open(path, "rb") as fh:
                    same = hashlib.sha256(fh.read()).hexdigest() == entry["sha256"]
            if not same:
                print(f"repro: {shown(rel)} here is not the one the bisect ran (sha256 {entry['sha256'][:16]}...): "
                      "the command uses the one here", file=sys.stderr)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
        os.chmod(path, entry["mode"])


def main(argv):
    other = arguments(argv, takes_command=True)
    command = other or unmasked(COMMAND)
    here = os.path.dirname(os.path.abspath(__file__))
    if other is None:
        carry(here)
    with tempfile.TemporaryDirectory(prefix="bisector-repro-") as tmp:
        write_files(tmp, FILES)
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        for key, value in ENV.items():
            env.setdefault(key, value)
        result = env.setdefault("BISECTOR_RESULT", os.path.join(tmp, "result.json"))
        code = subprocess.call([sys.executable, os.path.join(tmp, "command", "__main__.py"), *METER_ARGS, "--",
                                *command], env=env, cwd=None if other else here)
        if code != 0:   # judged as the bisect judged a failure: BAD with --crash-is-bad, else skipped
            print(f"the command exited {code}: nothing measured; " + (
                "BAD, as the run's rule says of a failure (--crash-is-bad)" if CRASH_IS_BAD else
                "not judged (exit 125), as the bisect skipped a failure"), file=sys.stderr)
            if NOT_CARRIED and other is None:
                print("(it may need what this script does not carry: " + "; ".join(map(shown, NOT_CARRIED)) + ")",
                      file=sys.stderr)
            return 1 if CRASH_IS_BAD and other is None else 125
        with open(result) as fh:
            found = json.load(fh)
    if found.get("error"):
        print(f"not measured: {shown(found['error'])}", file=sys.stderr)
        return 125
    metrics = found["metrics"]
    print(f"measured {shown(shlex.join(other or COMMAND))}: meter {found.get('meter')}, device "
          f"{found.get('device', {}).get('type')}, torch {found.get('versions', {}).get('torch')}, "
          f"{human(metrics.get('optimizer_steps', 0), 'optimizer_steps')} optimizer steps, the first "
          f"{found.get('measure_skip')} left out; metrics over {found.get('scope')}")
    for name, value in metrics.items():
        print(f"  {name:<32} {human(value, name)}")
    peaks = [s.get("peak_bytes", s.get("cuda_peak_allocated")) for s in found.get("steps", [])]
    if any(p is not None for p in peaks):
        print("  per step (peak):", ", ".join("-" if p is None else human(p, "peak_bytes") for p in peaks))
    if other is not None:
        return 0
    value = metrics.get(METRIC)
    if value is None:
        print(f"{METRIC} not measured: {shown(found.get('absent', {}).get(METRIC, 'absent'))}", file=sys.stderr)
        return 125
    bad = judged(value)
    return 1 if bad and result.startswith(tmp) else 0   # run by bisector: it judges the result file


# >>> common
# <<<


# >>> units
UNITS, DECLARED_UNITS = "", {}   # bisector's unit formatting (bisector/core/units.py), the probe's declared units
# <<<


# >>> files
FILES = {}   # the command meter's files, relative path -> source (bisector writes them here)
# <<<


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
