"""The argument parser and the mapping of CLI flags onto the job config."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_env_and_probe_flags(p: argparse.ArgumentParser, g) -> None:
    """--env and --index-url (into group ``g``) and the probe group, shared by ``run`` and ``matrix``."""
    g.add_argument("--env", help="environment spec: a built-in name (bisector/data/specs) or a path to a .toml")
    g.add_argument("--index-url", help="package index (default: the installers' configuration)")
    g = p.add_argument_group("probe")
    g.add_argument("--probe", help="built-in probe name, or a path to a probe script")
    g.add_argument("--probe-cmd", help="command run in the environment: exit 0 good, 125 skip, 1-127 bad")
    g.add_argument("--probe-arg", action="append", dest="probe_args", help="argument passed to the probe")
    g.add_argument("--timeout", type=float, help="seconds before a probe run is stopped (SKIP)")


def _run_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("job")
    g.add_argument("--config", type=Path, help="job file (default: ./bisect.toml when present)")
    g.add_argument("--package", help="distribution to bisect, e.g. accelerate")
    g.add_argument("--good", help="known good release or git ref")
    g.add_argument("--bad", help="known bad release or git ref")
    g.add_argument("--mode", choices=["auto", "releases", "commits"])
    g.add_argument("--repo", help="git repository (local path or URL) for commit mode / refinement")
    g.add_argument("--repo-url", help="web URL for commit/PR/compare links when --repo is a local clone")
    g.add_argument("--pre", action="store_true", default=None, help="include pre-releases and yanked releases")
    g.add_argument("--all-parents", dest="first_parent", action="store_false", default=None,
                   help="bisect all commits, not only the first-parent line")
    g.add_argument("--find-fix", action="store_true", default=None, help="search the first GOOD after BAD")
    g.add_argument("--widen", action="store_true", default=None,
                   help="when good is already BAD, walk back through older releases until one is GOOD")
    g.add_argument("--with", dest="with_", action="append", metavar="PKG==VERSION",
                   help="pin a companion exactly over the env spec (torch==X sets the base); repeatable")
    add_env_and_probe_flags(p, g)
    g = p.add_argument_group("verdicts")
    g.add_argument("--metric", help="metric the criterion reads")
    g.add_argument("--threshold", type=float, help="BAD when the metric is beyond this value")
    g.add_argument("--max-increase", help="BAD when the metric moved more than this from good ('20%%' or a delta)")
    g.add_argument("--auto", action="store_true", default=None, help="threshold midway between the endpoints")
    g.add_argument("--direction", choices=["increase", "decrease"], help="which way a regression moves the metric")
    g.add_argument("--repeats", type=int, help="measurements per candidate")
    g.add_argument("--max-repeats", type=int, help="cap for adaptive repeats near the threshold")
    g.add_argument("--noise", type=float, help="noise band around the threshold (metric units)")
    g.add_argument("--crash-is-bad", action="store_true", default=None, help="a crashing probe counts as BAD")
    g.add_argument("--confirm", action=argparse.BooleanOptionalAction, default=None,
                   help="re-measure the boundary pair at the end")
    g = add_execution_flags(p, "candidates probed at once (k-way search)",
                            "build the next midpoints' environments while a probe runs")
    g.add_argument("--resume", nargs="?", const="", metavar="RUN",
                   help="resume a stored run (default: the latest) with its own configuration")


def add_execution_flags(p: argparse.ArgumentParser, jobs_help: str, prefetch_help: str):
    """The execution group shared by ``run`` and ``matrix``; returns it for command-specific flags."""
    g = p.add_argument_group("execution")
    g.add_argument("--jobs", type=int, help=jobs_help)
    g.add_argument("--prefetch", action=argparse.BooleanOptionalAction, default=None, help=prefetch_help)
    g.add_argument("--store", type=Path, help="SQLite store (default: in the user cache dir)")
    g.add_argument("--cache-dir", type=Path, help="environment and repository cache")
    g.add_argument("--env-backend", choices=["uv", "virtualenv"])
    g.add_argument("--json", action="store_true", help="print the result as JSON")
    return g


def probe_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """--probe (a built-in name or a script path), --probe-cmd, --probe-arg, --timeout as a [probe] table."""
    probe: dict[str, Any] = {"cmd": args.probe_cmd, "args": args.probe_args, "timeout": args.timeout}
    if args.probe:
        looks_like_path = args.probe.endswith(".py") or "/" in args.probe or Path(args.probe).is_file()
        probe["path" if looks_like_path else "name"] = args.probe
    return probe


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """CLI flags as a partial config (None = not given)."""
    probe = probe_overrides(args)
    return {
        "job": {"package": args.package, "good": args.good, "bad": args.bad, "mode": args.mode,
                "repo": args.repo, "repo_url": args.repo_url, "pre": args.pre, "first_parent": args.first_parent,
                "find_fix": args.find_fix, "widen": args.widen, "env": args.env, "index_url": args.index_url,
                "pins": args.with_},
        "probe": probe,
        "criterion": {"metric": args.metric, "threshold": args.threshold, "max_increase": args.max_increase,
                      "auto": args.auto, "direction": args.direction, "repeats": args.repeats,
                      "max_repeats": args.max_repeats, "noise": args.noise, "crash_is_bad": args.crash_is_bad,
                      "confirm": args.confirm},
        "run": {"jobs": args.jobs, "prefetch": args.prefetch, "store": args.store, "cache_dir": args.cache_dir,
                "env_backend": args.env_backend},
    }


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line and exit code 2 (no usage dump)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="bisector", description="Find the release or commit that made a "
                                     "training step use more memory, run slower, or break.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command")
    _run_flags(sub.add_parser("run", help="bisect a version range (default job: ./bisect.toml)"))
    p = sub.add_parser("probe", help="measure one version: build (or reuse) its environment and run the probe")
    p.add_argument("--with", dest="with_", action="append", required=True, metavar="PKG==VERSION",
                   help="package pin; the first is the candidate, further pins are companions")
    for flag in ("--probe", "--env", "--index-url", "--store", "--cache-dir"):
        p.add_argument(flag, type=Path if flag in ("--store", "--cache-dir") else str)
    p.add_argument("--probe-arg", action="append", dest="probe_args")
    p.add_argument("--json", action="store_true")
    for name, text in (("log", "print a run's bisect log"), ("report", "print a run's report")):
        q = sub.add_parser(name, help=text)
        q.add_argument("run", nargs="?", help="run id (default: the latest)")
        q.add_argument("--store", type=Path)
        if name == "report":
            q.add_argument("--format", choices=["markdown", "json", "text"], default="markdown")
    from .matrix_cli import add_matrix_parser
    add_matrix_parser(sub)
    q = sub.add_parser("runs", help="list stored runs")
    q.add_argument("--store", type=Path)
    q = sub.add_parser("envs", help="list or garbage-collect cached environments")
    q.add_argument("action", choices=["list", "gc"])
    q.add_argument("--cache-dir", type=Path)
    q.add_argument("--keep-last", type=int)
    q.add_argument("--max-size", help="e.g. 2G, 500M")
    return parser
