#!/usr/bin/env bash
# bench/gpu_first: the first run of the CUDA path on a GPU machine, in one command of at most 6 minutes
# of GPU time (the steps' planned seconds below; BUDGET, default 520 s, stops what is left after it).
#
#   bench/gpu_first/run.sh                       # on the GPU machine: its python3 and nothing else
#   OUT=/tmp/gf DEV=cpu bench/gpu_first/run.sh   # the dry run on the CPU (CI runs it as a test)
#
# Steps run in this order, each under its own timeout (its cap, or what is left of BUDGET), each writing
# $OUT/<step>.json and $OUT/<step>.log as it goes; the probe results they read are kept in
# $OUT/results/. Last, $OUT/check.md: every check with PASS / FAIL / SKIP (also printed).
# A step is one file beside this one (NAME.py, using gf.Step) and one line below.
# Environment: OUT (default ./gpu-first), DEV (cuda | cpu, default cuda), BUDGET (s), PYTHON (python3),
# BUNDLE (a .tgz path: all of OUT packed there after every step, for machines that return few files).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
export GF_OUT=${OUT:-$PWD/gpu-first} GF_DEV=${DEV:-cuda} GF_BUDGET=${BUDGET:-520} GF_START=$(date +%s)
export GF_BUNDLE=${BUNDLE:-}
PY=${PYTHON:-python3}
mkdir -p "$GF_OUT"
step() { "$PY" "$HERE/gf.py" step "$@"; }

#    name        planned GPU s   cap s
step facts       10              60
step meter       35              240
step invariants  25              150
step resets      20              150
step precision   25              180
step oom         35              180
step seed        150             300
step allocator   60              200

"$PY" "$HERE/report.py"
