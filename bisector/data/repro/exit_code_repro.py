#!/usr/bin/env python3
# >>> header
# A standalone reproduction of an exit-code probe (--probe-cmd): bisector writes the run's own header here (what
# it reproduces, both sides' pins and install lines).
# <<<
"""Runs the bisect's exit-code command (COMMAND, below, word for word, without a shell) in a scratch
directory, as the bisect ran it, with this interpreter's ``bin`` first on ``PATH`` (so ``python`` is this
environment's), and exits with its exit code: git bisect run's contract, 0 GOOD, 125 SKIP, another from 1
to 127 BAD (a command killed by a signal: 128 + the signal). Nothing in it imports bisector.
"""
import os
import subprocess
import sys
import tempfile

USAGE = ""   # (no arguments: the bisect's command)
# >>> settings
COMMAND = ["true"]   # the bisect's command, word for word
ENV = {}   # what bisector told the command (set only where the environment does not say)
# <<<


def main(argv):
    arguments(argv)
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    for key, value in ENV.items():
        env.setdefault(key, value)
    with tempfile.TemporaryDirectory(prefix="bisector-repro-") as tmp:
        try:
            code = subprocess.call(COMMAND, cwd=tmp, env=env)
        except OSError as exc:   # (what the bisect would have skipped: no verdict)
            print(f"cannot run {shown(COMMAND[0])}: {shown(exc.strerror or exc)}", file=sys.stderr)
            return 125
    code = code if code >= 0 else 128 - code
    said = "GOOD" if code == 0 else "SKIP" if code == 125 else "BAD" if code < 128 else "not judged"
    print(f"exit {code}: {said}", file=sys.stderr)
    return code


# >>> common
# <<<


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
