#!/usr/bin/env bash
# acceptance/gpu_first: the first run of the CUDA path on a GPU machine, in one command of at most 600 s
# (the steps' planned GPU seconds below add up to 415; BUDGET, default 520 s, skips what is left after it).
#
#   bash acceptance/gpu_first/run.sh                  # on the GPU machine: its python3 and nothing else
#   OUT=/tmp/gf DEV=cpu bash acceptance/gpu_first/run.sh   # the dry run on the CPU (the slow tests run it)
#
# Steps run in this order, each under its own timeout (its cap, or what is left of BUDGET), each writing
# $WORK/<step>.json and $WORK/<step>.log as it goes (the probe results they read in $WORK/results/). After
# every step, $WORK/check.md (every check with PASS / FAIL / SKIP / INCOMPLETE) is written and all of WORK
# is packed into $OUT/gpu_first.tgz, with check.md beside it: two files in OUT, whatever happens (a device
# that returns 8 files returns everything). check.md is printed last.
# A step is one file beside this one (NAME.py, using gf.Step) and one line below; its inner timeouts
# (TIMEOUTS in NAME.py) and the runner's reserve fit its cap.
# Environment: OUT (default ./gpu-first), WORK (default a new directory under TMPDIR), DEV (cuda | cpu,
# default cuda), BUDGET (s), PYTHON (python3).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
export GF_RETURN=${OUT:-$PWD/gpu-first} GF_DEV=${DEV:-cuda} GF_BUDGET=${BUDGET:-520} GF_START=$(date +%s)
mkdir -p "${TMPDIR:-/tmp}"
export GF_OUT=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/gpu-first.XXXXXX")}
[ -n "$GF_OUT" ] || { echo "[run] no work directory: mktemp failed under ${TMPDIR:-/tmp}; set WORK" >&2; exit 2; }
PY=${PYTHON:-python3}
mkdir -p "$GF_OUT" "$GF_RETURN"
echo "[run] work directory $GF_OUT; bundle and check.md in $GF_RETURN"
# A SIGTERM, SIGINT or SIGHUP (to this script, or to the `timeout` it runs under) is passed on to the step
# runner, which ends its step's session before it exits (gf.py); then this script ends with the signal's code.
RUNNER=
stop() {
  trap '' TERM INT HUP
  if [ -n "$RUNNER" ]; then kill -s "$1" "$RUNNER" 2>/dev/null; wait "$RUNNER" 2>/dev/null; fi
  echo "[run] stopped by SIG$1: the running step's processes ended; check.md and the bundle say what was found" >&2
  exit "$2"
}
trap 'stop TERM 143' TERM
trap 'stop INT 130' INT
trap 'stop HUP 129' HUP
step() { "$PY" "$HERE/gf.py" step "$@" & RUNNER=$!; wait "$RUNNER"; RUNNER=; }   # (in the background: a trap runs at once)

#    name        planned GPU s   cap s     (docs/gpu.md: each plan from the step's structure, with its margin)
step facts       20              120
step meter       55              240
step invariants  45              150
step resets      15              150
step precision   30              180
step oom         25              180
step seed        140             300
step allocator   75              200
step command     10              90

"$PY" "$HERE/report.py"
