"""The parsed flags as the config's tables: ``run`` and ``matrix`` share one mapping of the probe, verdict
and execution flags (None: not given, the job file's or the default value stands)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Optional

from bisector.cli.args import CRITERION_FLAGS, flag_dest
from bisector.cli.followflags import followup_overrides
from bisector.errors import UsageError
from bisector.job.config import JobConfig, RunSection
from bisector.job.jobfile import load_config
from bisector.job.layering import validated


def probe_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """--probe (a built-in name or a script path), --probe-cmd, --probe-arg, --timeout as a [probe] table."""
    probe: dict[str, Any] = {"cmd": getattr(args, "probe_cmd", None), "args": args.probe_args,
                             "timeout": getattr(args, "timeout", None),
                             "measure_skip": getattr(args, "measure_skip", None), "meter": getattr(args, "meter", None),
                             "fake": getattr(args, "fake", None)}
    command = getattr(args, "command_words", None)
    if command:
        if args.probe or probe["cmd"]:
            raise UsageError(f"-- {command[0]} ... is the probe: give it without {'--probe' if args.probe else '--probe-cmd'}")
        if args.probe_args:
            raise UsageError("-- CMD takes no --probe-arg: the program's own arguments follow it")
        probe.update(command=list(command), cwd=str(Path.cwd()))
    if args.probe:
        looks_like_path = args.probe.endswith(".py") or "/" in args.probe or Path(args.probe).is_file()
        probe["path" if looks_like_path else "name"] = args.probe
    return probe


def shared_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The [probe], [criterion] and [run] tables from the flags ``run`` and ``matrix`` share (None = not given)."""
    return {"probe": probe_overrides(args),
            "criterion": {flag_dest(flag): getattr(args, flag_dest(flag), None) for flag, *_ in CRITERION_FLAGS},
            "run": {"jobs": args.jobs, "prefetch": args.prefetch, "warm": args.warm, "store": args.store,
                    "cache_dir": args.cache_dir, "env_backend": args.env_backend, "executor": args.executor,
                    "ray_address": args.ray_address}}


def run_section(args: argparse.Namespace) -> RunSection:
    """The ``[run]`` table the execution flags give (``diff`` and ``probe``: how to run them)."""
    given = {k: v for k, v in shared_overrides(args)["run"].items() if v is not None}
    return validated(RunSection, given, "the flags")


def run_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """``bisector run``'s flags as a partial job config."""
    job = {"package": args.package, "good": args.good, "bad": args.bad, "mode": args.mode, "repo": args.repo,
           "repo_url": args.repo_url, "pre": args.pre, "first_parent": args.first_parent, "find_fix": args.find_fix,
           "widen": args.widen, "env": args.env, "index_url": args.index_url, "pins": args.with_,
           "nightly_index": args.nightly_index,
           "clone": args.clone, **followup_overrides(args)}
    return {"job": job, "env": {"torch": args.torch}, **shared_overrides(args)}


def run_job(config_path: Optional[Path], args: argparse.Namespace) -> JobConfig:
    """``bisector run``'s job: the built-in default job, the job file, then the flags."""
    overrides, replace = run_overrides(args), getattr(args, "replace_probe_args", False)
    if replace:
        overrides["probe"]["args"] = list(args.probe_args or [])   # none given: none at all
    return load_config(config_path, overrides, append_args=not replace)


def matrix_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """``bisector matrix``'s flags as a partial matrix config."""
    return {"matrix": {"env": args.env, "index_url": args.index_url}, **shared_overrides(args)}
