"""Each subcommand's parser, and the whole parser (``build_parser``); the flag groups they share are in
bisector/cli/args.py."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from bisector.cli.args import (KINDS, MATRIX, PROBE_ARG_HELP, RUN, OneLineParser, add_command_flags,
                               add_criterion_flags, add_env_and_probe_flags, add_execution_flags)
from bisector.cli.examples import epilog
from bisector.cli.followflags import add_followup_flags
from bisector.cli.runflags import add_torch_flag


def _command(sub, name: str, text: str, description: Optional[str] = None) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=text, description=description or text[:1].upper() + text[1:] + ".",
                            epilog=epilog(name), formatter_class=argparse.RawDescriptionHelpFormatter)
    # before or after the command (bisector --debug run, bisector run --debug); SUPPRESS: not given here, the
    # top level's value stands
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    return parser


def _run_parser(sub) -> None:
    p = _command(sub, RUN, "bisect a version range (the built-in default job, ./bisect.toml and flags over it)",
                 "Bisect a version range: releases from the package index, commits from a repository. With no "
                 "arguments, the built-in default job (the seed report's range); ./bisect.toml (or --config) "
                 "and then flags override it. Exit 0: an answer (found, no regression); 2: bad input; 3: no "
                 "answer (predates the range, undecided).")
    g = p.add_argument_group("job")
    g.add_argument("--config", type=Path, help="job file (default: ./bisect.toml when present)")
    g.add_argument("--package", help="distribution to bisect, e.g. accelerate")
    g.add_argument("--good", help="known good release or git ref")
    g.add_argument("--bad", help="known bad release or git ref")
    g.add_argument("--mode", choices=["auto", "releases", "nightlies", "commits"],
                   help="releases (from the index), nightlies (torch's, from --nightly-index; --good/--bad as days "
                        "or nightly versions), commits (of --repo), or auto: releases, then the commits between "
                        "the two boundary releases when --repo (or --clone) allows (torch: the nightlies between "
                        "them, with --nightly-index)")
    g.add_argument("--nightly-index", metavar="URL",
                   help="torch: the package index of its nightly wheels (a PEP 503/691 simple index)")
    g.add_argument("--clone", action="store_true", default=None,
                   help="in auto mode, allow cloning the repository named in the package's metadata "
                        "(a partial clone, with progress) to refine to the commit")
    g.add_argument("--repo", help="git repository (local path or URL) for commit mode / refinement")
    g.add_argument("--repo-url", help="web URL for commit/PR/compare links when --repo is a local clone")
    g.add_argument("--pre", action="store_true", default=None, help="include pre-releases and yanked releases")
    g.add_argument("--all-parents", dest="first_parent", action="store_false", default=None,
                   help="bisect all commits, not only the first-parent line")
    g.add_argument("--find-fix", action="store_true", default=None,
                   help="search the first GOOD after BAD: --bad names the older side (still broken), --good the "
                        "newer (fixed); a relative rule is measured from --good")
    g.add_argument("--widen", action="store_true", default=None,
                   help="when good is already BAD, walk back through older releases until one is GOOD")
    g.add_argument("--with", dest="with_", action="append", metavar="PKG==VERSION",
                   help="pin a companion exactly over the env spec (torch==X sets the base); repeatable")
    add_torch_flag(g)
    probe = add_env_and_probe_flags(p, g)
    probe.add_argument("--replace-probe-args", action="store_true",
                       help="the --probe-arg flags are the probe's arguments (none when none is given) instead of "
                            "following the job's")
    add_criterion_flags(p, RUN)
    add_followup_flags(p)
    g = add_execution_flags(p, RUN)
    g.add_argument("--full", action="store_true", help="with --json: every point's probe details and every "
                                                       "step's metrics (by default only the headline ones)")
    g.add_argument("--resume", nargs="?", const="", metavar="RUN",
                   help="resume a stored run with its own configuration and id: RUN is a run id or a config hash "
                        "(a prefix will do); without RUN, the latest run of the job ./bisect.toml and the other "
                        "flags give (by its config hash), or with neither the latest bisect run")


def _matrix_parser(sub) -> None:
    p = _command(sub, MATRIX, "probe a grid of versions, compare with the last run, bisect what moved",
                 "Run the probe over the [matrix] grid of versions, store the run, compare it "
                 "with the previous run of the same grid (or --baseline) and write reports to --out. "
                 "Exit 0: nothing found, 1: confirmed regression, 2: usage error, 3: nothing measured, "
                 "4: cells lost (not measured tonight, though the baseline measured them).")
    g = p.add_argument_group("matrix")
    g.add_argument("--config", type=Path, help="job file with a [matrix] table (default: ./bisect.toml)")
    g.add_argument("--out", type=Path, default=Path("bisector-matrix"),
                   help="report directory: matrix.md, matrix.json, plot-<metric>.png (default: ./bisector-matrix)")
    g.add_argument("--baseline", metavar="RUN_ID", help="compare with this matrix run "
                   "(default: the previous run of the same grid and probe)")
    g.add_argument("--bisect-on-regression", action="store_true",
                   help="bisect each confirmed regression between the versions that bound it")
    g.add_argument("--html", type=Path, metavar="DIR",
                   help="also write a static history page (index.html, opens from disk): per metric the cells "
                   "over the stored nights with change points, and the grid lines over the versions")
    g.add_argument("--issues", type=Path, metavar="DIR",
                   help="where the draft upstream issues go, one file per step found "
                   "(<package>-<version>-<metric>.md, updated on later nights; default: <--out>/issues)")
    add_env_and_probe_flags(p, g)
    add_criterion_flags(p, MATRIX)
    add_execution_flags(p, MATRIX)


def _probe_parser(sub) -> None:
    p = _command(sub, "probe", "measure one version: build (or reuse) its environment and run the probe",
                 "Measure one version: build (or reuse) its environment, run the probe (the default job's "
                 "unless --probe names another), store the measurement and print it, headline metrics first. "
                 "Exit 0 when it measured, 3 when it could not.")
    p.add_argument("--with", dest="with_", action="append", required=True, metavar="PKG==VERSION",
                   help="package pin; the first is the candidate, further pins are companions (torch==X: the base)")
    p.add_argument("--probe", help="built-in probe name, or a path to a probe script (default: the default job's)")
    p.add_argument("--probe-arg", action="append", dest="probe_args", metavar="ARG", help=PROBE_ARG_HELP)
    p.add_argument("--timeout", type=float, help="seconds before the probe run is stopped")
    add_command_flags(p.add_argument_group("your program (-- CMD)"))
    p.add_argument("--env", help="environment spec: a built-in name ('default': envs/default.toml) or a path to a .toml")
    p.add_argument("--index-url", help="package index (default: the installers' configuration)")
    add_torch_flag(p)
    p.add_argument("--fresh", action="store_true", help="measure again (a new repeat; stored ones are kept)")
    p.add_argument("--explain", action="store_true", help="add where the bytes live (by phase and allocation site)")
    p.add_argument("--all", action="store_true", help="list every metric, not only the headline ones")
    p.add_argument("--metric", help="the metric printed first, and the one --explain follows (default: the probe's: "
                                    "step_peak_bytes for your program, the default job's for its probe)")
    add_execution_flags(p, "probe")


def _other_parsers(sub) -> None:
    _probe_parser(sub)
    for name, text in (("log", "print a run's git-bisect-style log"), ("report", "print a run's report")):
        q = _command(sub, name, text)
        q.add_argument("run", nargs="?", help="run id or a unique prefix (default: the latest finished bisect, "
                       "else the latest finished run; stderr says which)")
        q.add_argument("--store", type=Path, help="SQLite store (default: in the user cache dir)")
        q.add_argument("--kind", choices=KINDS, help="the latest finished run of this kind")
        if name == "log":
            q.add_argument("--output", type=int, metavar="STEP",
                           help="print what step STEP (1-based, as the run printed it) printed: the last 200 lines of "
                                "each stream of its run (your program's output), as stored (redacted)")
        if name == "report":
            q.add_argument("--format", choices=["markdown", "json", "text"], default="markdown",
                           help="markdown for an issue comment (default), json for tools, text for a terminal")
            q.add_argument("--full", action="store_true",
                           help="json: every point's probe details and every step's metrics")
            q.add_argument("--repro", metavar="FILE",   # (as given: a trailing slash names a directory)
                           help="write a standalone repro script (no bisector needed: both sides' install lines, "
                                "the probe's loop in this run's setting), run it in the last good and first bad "
                                "environments and record what it printed in the run (exit 3 if it does not "
                                "reproduce the step)")
            q.add_argument("--cache-dir", type=Path, help="with --repro: the environment cache (default: the run's)")


def _diff_parser(sub) -> None:
    """The ``diff`` subcommand and its flags."""
    p = _command(sub, "diff", "two setups at one version: which difference explains the metric",
                 "Measure setup A and setup B (package pins, probe settings) at one version of a package, then "
                 "search (ddmin) for the smallest difference that moves one to the other's side of the criterion "
                 "(default: the probe's metric, midway between A and B). Exit 0: an answer, 2: bad input, "
                 "3: undecided.")
    g = p.add_argument_group("setups")
    g.add_argument("--package", help="the package under test (its version from the setups) when no --with names it")
    g.add_argument("--with", dest="with_", action="append", default=[], metavar="PKG==VERSION",
                   help="a pin of both setups; the first names the package under test and its version")
    for side in ("a", "b"):
        up = side.upper()
        g.add_argument(f"--{side}-with", action="append", default=[], metavar="PKG==VERSION", help=f"a pin of {up}")
        g.add_argument(f"--{side}-lock", type=Path, metavar="FILE", help=f"{up}'s pins, in pip freeze format")
        g.add_argument(f"--{side}-arg", action="append", default=[], metavar="ARG",
                       help=f"a probe argument of {up}, after the shared ones: --{side}-arg=--loop=trainer (with -- CMD: "
                            f"a word after your program's own: --{side}-arg=--bf16); repeatable")
        g.add_argument(f"--{side}-env", action="append", default=[], metavar="NAME=VALUE",
                       help=f"an environment variable {up} runs with (ACCELERATE_MIXED_PRECISION=bf16); repeatable")
    g.add_argument("--follow", action="store_true", help="when one package is the difference, bisect it")
    g.add_argument("--follow-repo", metavar="REPO", help="that package's repository, to follow it to its commits")
    add_env_and_probe_flags(p, g)
    add_criterion_flags(p, RUN)
    add_execution_flags(p, "diff")


def build_parser() -> argparse.ArgumentParser:
    """The ``bisector`` parser and its subcommands."""
    parser = OneLineParser(prog="bisector", description="Find the release or commit that made a "
                                     "training step use more memory, run slower, or break.",
                           epilog=epilog("bisector"), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("-V", "--version", action="store_true",
                        help="print bisector's version and its built-in probes' versions")
    sub = parser.add_subparsers(dest="command")
    _run_parser(sub)
    _other_parsers(sub)
    _matrix_parser(sub)
    _diff_parser(sub)
    q = _command(sub, "runs", "list stored runs")
    q.add_argument("--store", type=Path, help="SQLite store (default: in the user cache dir)")
    q.add_argument("--kind", choices=KINDS, help="only runs of this kind")
    q = _command(sub, "store", "check the store, or recover every readable row of a damaged one")
    q.add_argument("action", choices=["check", "recover"],
                   help="check: PRAGMA integrity_check; recover: copy every readable row into a new store (in the "
                   "damaged one's place, which is kept as <store>.damaged-<time>, unless --out names another file)")
    q.add_argument("--store", type=Path, help="SQLite store (default: in the user cache dir)")
    q.add_argument("--out", type=Path, help="recover: write the new store here and leave the damaged one as it is")
    q = _command(sub, "envs", "list or garbage-collect cached environments")
    q.add_argument("--cache-dir", type=Path, help="environment cache (default: in the user cache dir)")
    actions = q.add_subparsers(dest="action", required=True, metavar="{list,gc}",
                              help="list: the cached environments; gc: remove the old ones")
    for name, text in (("list", "list the cached environments and torch bases: size, last use, in use"),
                       ("gc", "remove cached environments and torch bases per the limits (at least one)")):
        a = actions.add_parser(name, help=text, description=text[:1].upper() + text[1:] + ".",
                               epilog=epilog(f"envs {name}"), formatter_class=argparse.RawDescriptionHelpFormatter)
        a.add_argument("--cache-dir", type=Path, default=argparse.SUPPRESS,   # before or after the action
                       help="environment cache (default: in the user cache dir)")
        if name == "list":
            continue
        a.add_argument("--keep-last", type=int, metavar="N", help="keep the N most recently used environments")
        a.add_argument("--max-size", metavar="SIZE",
                       help="remove the least recently used until under this size, e.g. 2G, 500M")
        a.add_argument("--older-than", metavar="AGE",
                       help="remove environments and torch bases not used for this long, e.g. 14d, 12h, 2w")
        a.add_argument("--bases-max-size", metavar="SIZE",
                       help="remove the least recently used torch bases (and their environments) until the bases "
                            "take at most this much disk, e.g. 20G")
    return parser
