"""The argument parser: ``run`` and ``matrix`` share one set of probe, verdict and execution flags
(bisector/cli/overrides.py maps them onto the config tables)."""
from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import Any, Optional

from bisector.cli.runflags import add_output_flags
from bisector.safety.safe_text import error_line
from bisector.store.storage import RunKind

RUN, MATRIX = "run", "matrix"
KINDS = [kind.value for kind in RunKind]   # --kind of log, report and runs
PROBE_ARG_HELP = ("one argument for the probe, added after the job's: --probe-arg=--loop=accelerate "
                  "(a value starting with '-' also works as the next word); repeatable")
VALUE_FLAGS_TAKING_DASHES = ("--probe-arg", "--a-arg", "--b-arg", "--a-env", "--b-env")   # values may start with '-' (glue_dash_values)

# flag, argparse options, help for `run`, help for `matrix` (None: not a matrix flag)
CRITERION_FLAGS: list[tuple[str, dict[str, Any], str, Optional[str]]] = [
    ("--metric", {}, "metric the criterion reads", "metric the criterion reads"),
    ("--threshold", {"type": float}, "BAD when the metric is beyond this value",
     "regression when the metric goes beyond this value"),
    ("--max-increase", {}, "BAD when the metric moved more than this from good ('20%%' or a delta)",
     "regression when the metric moved more than this from the baseline cell ('20%%' or a delta)"),
    ("--max-change", {}, "BAD when the metric moved more than this from good, either way ('1%%', a delta, or auto: "
     "from the good end's repeats); the good end is measured twice first",
     "regression when the metric moved more than this from the baseline cell, either way ('1%%' or a delta)"),
    ("--auto", {"action": "store_true", "default": None}, "threshold midway between the endpoints", None),
    ("--direction", {"choices": ["increase", "decrease"]}, "which way a regression moves the metric",
     "which way a regression moves the metric"),
    ("--repeats", {"type": int}, "measurements per candidate", "measurements per cell (median)"),
    ("--max-repeats", {"type": int}, "cap for adaptive repeats near the threshold", None),
    ("--noise", {"type": float}, "noise band around the threshold (metric units)",
     "noise band around the threshold (metric units)"),
    ("--crash-is-bad", {"action": "store_true", "default": None}, "a crashing probe counts as BAD", None),
    ("--oom-is-bad", {"action": argparse.BooleanOptionalAction, "default": None},
     "running out of memory counts as BAD (the default; --no-oom-is-bad: SKIP with its reason)",
     "a cell that runs out of memory is a regression (the default; --no-oom-is-bad: it is not)"),
    ("--timeout-is-bad", {"action": "store_true", "default": None}, "a probe stopped at --timeout counts as BAD",
     None),
    ("--confirm", {"action": argparse.BooleanOptionalAction, "default": None},
     "re-measure the boundary pair at the end", None),
    # stats mode (noisy metrics): samples against the good endpoint's, Mann-Whitney U and Kolmogorov-Smirnov
    ("--compare", {"choices": ["threshold", "stats", "exact"]},
     "threshold (default); stats: each candidate's samples against the good endpoint's (MWU + KS); exact: any "
     "change of the metric from the good end's is BAD (bit-equality)", None),
    ("--min-effect", {}, "stats mode: the smallest shift that is a regression ('5%%' of good, or a delta)", None),
    ("--alpha", {"type": float}, "stats mode: DIFFERENT at or below this p-value (default 0.0002)", None),
]
EXECUTION_HELP = {RUN: ("candidates probed at once (k-way search)",
                        "build the next midpoints' environments while a probe runs"),
                  MATRIX: ("cells measured at once (one probe per GPU when GPUs are present)",
                           "build the next cells' environments while probes run"),
                  "diff": ("probes that share this machine's cores (each gets cores/N; default 1: all of them)",
                           "build the next setups' environments while a probe runs"),
                  "probe": ("probes that share this machine's cores (each gets cores/N; default 1: all of them)",
                            "build nothing ahead (one version: there is no next)")}


def flag_dest(flag: str) -> str:
    """argparse's attribute for ``flag`` ('--max-increase' -> 'max_increase')."""
    return flag.lstrip("-").replace("-", "_")


def add_env_and_probe_flags(p: argparse.ArgumentParser, g):
    """--env and --index-url (into group ``g``) and the probe group (returned)."""
    g.add_argument("--env", help="environment spec: a built-in name ('default': envs/default.toml) or a path to a .toml")
    g.add_argument("--index-url", help="package index (default: the installers' configuration)")
    g = p.add_argument_group("probe")
    g.add_argument("--probe", help="built-in probe name (ga_memory, import_cost, step_time), or a path to a probe script")
    g.add_argument("--probe-cmd", help="command run in the environment: exit 0 good, 125 skip, 1-127 bad")
    g.add_argument("--probe-arg", action="append", dest="probe_args", metavar="ARG", help=PROBE_ARG_HELP)
    g.add_argument("--timeout", type=float, help="seconds before a probe run is stopped (SKIP)")
    add_command_flags(g)
    return g


COMMAND_HELP = ("-- CMD [ARGS...]: your own program, run unchanged in each candidate environment (from this "
                "directory) and measured per optimizer step; --metric one of: ")


def add_command_flags(g) -> None:
    """The command meter's flags (for a program given after ``--``)."""
    from bisector.job.probe.program_metrics import metric_names

    g.add_argument("--measure-skip", type=int, metavar="N",
                   help="with -- CMD: optimizer steps left out as warm-up (default 1)")
    g.add_argument("--meter", choices=["tensors", "rss"],
                   help="with -- CMD: tensors (default: exact live tensor bytes on the CPU, CUDA's counters on a "
                        "GPU, RSS, time) or rss (RSS and time only: the cheapest)")
    g.add_argument("--fake", action="store_true", default=None,
                   help="with -- CMD: run the program on fake tensors (torch's FakeTensorMode, entered when it imports "
                        "torch): nothing allocated, the step peak the fake tensors' live bytes (meter 'cpu-dispatch "
                        "(fake)'); a program that reads a tensor's value (loss.item()) stops there, said in one line")
    g.description = textwrap.fill(COMMAND_HELP + ", ".join(metric_names()) + " (default step_peak_bytes; "
                                  "docs/probes.md#your-own-program)", 78)


def add_criterion_flags(p: argparse.ArgumentParser, command: str) -> None:
    """The verdicts group: every criterion flag ``command`` takes, with its help."""
    g = p.add_argument_group("verdicts")
    for flag, options, run_help, matrix_help in CRITERION_FLAGS:
        text = run_help if command == RUN else matrix_help
        if text is not None:
            g.add_argument(flag, help=text, **options)


def add_execution_flags(p: argparse.ArgumentParser, command: str):
    """The execution group; returns it for command-specific flags."""
    jobs_help, prefetch_help = EXECUTION_HELP[command]
    g = p.add_argument_group("execution")
    g.add_argument("-j", "--jobs", type=int, help=jobs_help)
    g.add_argument("--prefetch", action=argparse.BooleanOptionalAction, default=None, help=prefetch_help)
    g.add_argument("--warm", action=argparse.BooleanOptionalAction, default=None,
                   help="run built-in probes as forks of a warm worker per environment, which imports the ML stack "
                        "once (default: on; --no-warm: a fresh interpreter per probe run)")
    g.add_argument("--store", type=Path, help="SQLite store (default: in the user cache dir)")
    g.add_argument("--cache-dir", type=Path, help="environment and repository cache")
    g.add_argument("--env-backend", choices=["uv", "virtualenv"],
                   help="how candidate environments are built (default: uv, virtualenv + pip where uv is unusable)")
    add_executor_flags(g)
    g.add_argument("--json", action="store_true", help="print the result as JSON")
    add_output_flags(g)
    return g


def add_executor_flags(g) -> None:
    """--executor and --ray-address: where measurements run."""
    g.add_argument("--executor", choices=["local", "ray"],
                   help="where measurements run: local threads (default), or Ray tasks, one GPU each")
    g.add_argument("--ray-address", metavar="ADDR|auto",
                   help="with --executor ray: the cluster to join ('auto': the one `ray start` runs here; "
                   "default: start a local Ray)")


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line and exit code 2 (no usage dump)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {error_line(message)} (see --help)\n")


def glue_dash_values(argv: list[str]) -> list[str]:
    """``--probe-arg --loop=accelerate`` as ``--probe-arg=--loop=accelerate`` (argparse would take
    the value for an option of its own)."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in VALUE_FLAGS_TAKING_DASHES and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out
