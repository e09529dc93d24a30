"""The two setups of a diff and their differences: lock files (``pip freeze`` format) and ``--with``
pins per side or for both, the package under test, the changes between A and B, and the setup of a
trial (one side with some of the other side's values applied)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from packaging.utils import canonicalize_name

from bisector.core.changes import Change, ChangeKind
from bisector.difference.knobs import arg_changes, apply_args
from bisector.difference.diff_model import Setup
from bisector.core.requirements import parse_pin
from bisector.errors import UsageError

_LOCK_HINT = "not a NAME==VERSION pin (pip freeze format; editable and URL installs cannot come from an index)"


def read_lock(path: Path) -> dict[str, str]:
    """A ``pip freeze`` file as canonical name -> version; UsageError naming the file and line."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        try:
            name, version = parse_pin(line)
        except ValueError:
            raise UsageError(f"{path}:{number}: {raw.strip()!r} is {_LOCK_HINT}") from None
        name = canonicalize_name(name)
        if name in pins and pins[name] != version:
            raise UsageError(f"{path}:{number}: {name} is pinned twice ({pins[name]} and {version})")
        pins[name] = version
    return pins


def parse_pins(flag: str, texts: Iterable[str]) -> dict[str, str]:
    """``--with``-style pins as canonical name -> version (the order kept); UsageError naming the flag."""
    out: dict[str, str] = {}
    for text in texts:
        try:
            name, version = parse_pin(text)
        except ValueError as exc:
            raise UsageError(f"{flag} {exc}") from None
        out[canonicalize_name(name)] = version
    return out


def side_packages(lock: Optional[Path], both: dict[str, str], own: dict[str, str]) -> dict[str, str]:
    """One side's pins: its lock file, then the shared --with pins, then its own (later ones win)."""
    return {**(read_lock(lock) if lock else {}), **both, **own}


def package_under_test(package: Optional[str], with_pins: dict[str, str], a: dict[str, str],
                       b: dict[str, str]) -> tuple[str, str]:
    """(name, version): the first shared --with pin, or --package at the version both sides pin."""
    if with_pins and package is None:
        name = next(iter(with_pins))
        return name, with_pins[name]
    if package is None:
        raise UsageError("name the package under test: --with PKG==VERSION (for both sides) or --package NAME")
    name = canonicalize_name(package)
    versions = {a.get(name), b.get(name)} - {None}
    if with_pins.get(name):
        return name, with_pins[name]
    if len(versions) != 1:
        found = " and ".join(sorted(versions)) or "no version"
        raise UsageError(f"A and B must be at one version of {name} (they give {found}); "
                         "bisect between versions with bisector run")
    return name, versions.pop()


def changes_between(a: Setup, b: Setup) -> list[Change]:
    """Every difference: package versions (sorted by name), then probe arguments (in A's order)."""
    names = sorted(set(a.packages) | set(b.packages))
    packages = [Change(kind=ChangeKind.PACKAGE, name=n, a=a.packages.get(n), b=b.packages.get(n))
                for n in names if a.packages.get(n) != b.packages.get(n)]
    env = [Change(kind=ChangeKind.ENV, name=n, a=a.env.get(n), b=b.env.get(n))
           for n in sorted(set(a.env) | set(b.env)) if a.env.get(n) != b.env.get(n)]
    return packages + arg_changes(a.args, b.args) + env


def trial_setup(start: Setup, applied: list[Change], to_b: bool) -> Setup:
    """``start`` with the ``applied`` changes set to the other side's values (B's when ``to_b``)."""
    packages = dict(start.packages)
    for c in applied:
        value = c.b if to_b else c.a
        if c.kind is ChangeKind.PACKAGE and value is None:
            packages.pop(c.name, None)
        elif c.kind is ChangeKind.PACKAGE:
            packages[c.name] = value
    env = dict(start.env)
    for c in (c for c in applied if c.kind is ChangeKind.ENV):
        value = c.b if to_b else c.a
        if value is None:
            env.pop(c.name, None)
        else:
            env[c.name] = value
    args = apply_args(start.args, [c for c in applied if c.kind in (ChangeKind.ARG, ChangeKind.KNOB)], to_b)
    return Setup(packages=packages, args=args, env=env)


def short(c: Change, to_b: bool) -> str:
    """How a trial's label names one applied change: 'beta==2.0', 'no beta', '--loop=x', 'knob=value'."""
    value = c.b if to_b else c.a
    if c.kind is ChangeKind.PACKAGE:
        return f"{c.name}=={value}" if value is not None else f"no {c.name}"
    if c.kind in (ChangeKind.KNOB, ChangeKind.ENV):
        return f"{c.name}={value}" if value is not None else f"without {c.name}"
    return c.name if value == "" else f"without {c.name}" if value is None else f"{c.name}={value}"


def trial_label(start_name: str, applied: list[Change], to_b: bool) -> str:
    """'B + zero_grad_target=model', or 'A' alone."""
    if not applied:
        return start_name
    parts = [short(c, to_b) for c in applied]
    more = f" (+{len(parts) - 4} more)" if len(parts) > 5 else ""
    return f"{start_name} + " + ", ".join(parts[:4] if more else parts) + more
