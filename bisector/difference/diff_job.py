"""From what the user gave (flags, or ``bisector.diff``'s arguments) to a checked :class:`DiffJob`.

Everything is checked before anything is created or stored: lock files parse, pins are exact, the
package under test and every differing package version exist on the index, A differs from B. Packages
that come with torch from the base (triton, nvidia-*, cuda-*) are left out of both sides; torch itself
is a change only when the sides pin different versions (each side's torch then becomes its base).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from bisector.job.layering import layer, validated
from bisector.core.changes import ChangeKind
from bisector.core.candidate import Candidate
from bisector.core.criterion import Criterion
from bisector.data import specs_dir
from bisector.difference.diff_model import DiffJob, Setup
from bisector.difference.setups import changes_between, package_under_test, parse_pins, side_packages
from bisector.envs import TORCH, EnvSpec, load_env_spec
from bisector.envs import choose_torch
from bisector.envs import HEAVY
from bisector.errors import UsageError, cut
from bisector.job.probe import ProbeBase, probe_from
from bisector.sources.index import find_release, list_releases, release_candidate
from bisector.sources.installer_config import resolve_index_url

@dataclass
class DiffInput:
    """What a diff was asked for, as given (CLI flags or library arguments)."""

    package: Optional[str] = None
    pins: Iterable[str] = ()
    a_pins: Iterable[str] = ()
    b_pins: Iterable[str] = ()
    a_lock: Optional[Path] = None
    b_lock: Optional[Path] = None
    a_args: Iterable[str] = ()
    b_args: Iterable[str] = ()
    a_env: Iterable[str] = ()   # NAME=VALUE, the side's environment variables
    b_env: Iterable[str] = ()
    probe: dict[str, Any] = field(default_factory=dict)
    criterion: dict[str, Any] = field(default_factory=dict)
    env: Optional[str] = None
    index_url: Optional[str] = None
    follow: bool = False
    follow_repo: Optional[str] = None


@dataclass
class CheckedDiff:
    """A checked job, the release it measures, its env spec, and notes made while checking."""

    job: DiffJob
    candidate: Candidate
    spec: EnvSpec
    notes: list[str]


def _criterion(given: dict[str, Any], probe: ProbeBase) -> Criterion:
    """The given rule, ``auto`` (midway between A and B) when none; the probe's own metric by default."""
    table = {k: v for k, v in given.items() if v is not None}
    if probe.default_metric and not probe.judged_by_exit_code:
        table.setdefault("metric", probe.default_metric)
    if not probe.judged_by_exit_code and not table.get("metric"):
        raise UsageError("bisector diff needs --metric (the value whose side of the criterion A and B differ on)")
    if table.get("metric") and not any(table.get(k) is not None and table.get(k) is not False
                                       for k in ("threshold", "max_increase", "auto")):
        table["auto"] = True
    return validated(Criterion, table, "command line")


def _base_names(packages: dict[str, str], other: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """``packages`` without what comes with torch from the base; torch kept only when the sides differ."""
    kept, dropped = {}, []
    for name, version in packages.items():
        if (HEAVY.match(name) and name != TORCH) or (name == TORCH and other.get(TORCH) == version):
            dropped.append(name)
        else:
            kept[name] = version
    return kept, dropped


def _sides(given: DiffInput) -> tuple[str, str, Setup, Setup, list[str]]:
    both = parse_pins("--with", given.pins)
    a = side_packages(given.a_lock, both, parse_pins("--a-with", given.a_pins))
    b = side_packages(given.b_lock, both, parse_pins("--b-with", given.b_pins))
    name, version = package_under_test(given.package, both, a, b)
    for side, pins in (("A", a), ("B", b)):
        if pins.get(name, version) != version:
            raise UsageError(f"{side} pins {name} {pins[name]}, not the version compared ({version})")
        pins.pop(name, None)
    a_kept, a_dropped = _base_names(a, b)
    b_kept, b_dropped = _base_names(b, a)
    dropped = sorted(set(a_dropped) | set(b_dropped))
    notes = [f"left out (they come with torch from the base): {', '.join(dropped)}"] if dropped else []
    return name, version, Setup(packages=a_kept, args=list(given.a_args), env=_variables("--a-env", given.a_env)), \
        Setup(packages=b_kept, args=list(given.b_args), env=_variables("--b-env", given.b_env)), notes


def _variables(flag: str, given: Iterable[str]) -> dict[str, str]:
    """``NAME=VALUE`` words as a side's environment variables; UsageError naming the flag."""
    out = {}
    for word in given:
        name, sep, value = str(word).partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name) or "\x00" in value:
            raise UsageError(f"{flag} {cut(str(word))!r} is not NAME=VALUE (an environment variable of that side)")
        out[name] = value
    return out


def _exists(index_url: str, name: str, version: str) -> Candidate:
    try:
        return release_candidate(name, find_release(list_releases(index_url, name), version))
    except UsageError as exc:
        raise UsageError(f"{name}: {exc}") from None


def check(given: DiffInput) -> CheckedDiff:
    """The checked diff (see the module); UsageError (one line) for anything wrong."""
    name, version, a, b, notes = _sides(given)
    if a == b:
        raise UsageError("A and B are the same setup (same pins, probe arguments and variables): nothing to compare")
    probe = validated(probe_from, layer({"probe": {"name": "ga_memory"}}, {"probe": given.probe})["probe"],
                      "command line")
    probe.script()  # an unknown probe is a usage error before any work
    probe.settle()
    criterion = _criterion(given.criterion, probe)
    spec = load_env_spec(given.env or "default", specs_dir())
    if TORCH not in {*a.packages, *b.packages}:   # a side's torch pin is its base
        spec = choose_torch(spec, None, name, given.index_url)
    url = resolve_index_url(given.index_url)
    candidate = _exists(url, name, version)
    for change in changes_between(a, b):
        if change.kind is ChangeKind.PACKAGE and change.name != TORCH:
            for value in {change.a, change.b} - {None}:
                _exists(url, change.name, value)
    job = DiffJob(package=name, version=version, a=a, b=b, probe=probe, criterion=criterion,
                  env=given.env or "default", index_url=given.index_url, follow=given.follow,
                  follow_repo=given.follow_repo)
    return CheckedDiff(job, candidate, spec, notes)
