"""Every read of a job's probe the repro makes, in one place: which kind of script it gets, the words it runs,
its files, where it ran, and the probe that runs a written script when it is verified. (The probe's own
model is bisector.job.probe_spec; a change of its shape changes this module, not the repro's others.)"""
from __future__ import annotations

import shlex
from enum import Enum
from pathlib import Path
from typing import Optional

from bisector.data import probes_dir
from bisector.job.config import JobConfig
from bisector.job.probe_code import builtin_files
from bisector.job.probe_spec import COMMAND_PROBE, ProbeSpec, builtin_script

GA_MEMORY = "ga_memory"


class Kind(str, Enum):
    """The repro script a probe gets (bisector/data/repro/<kind>_repro.py)."""

    GA_MEMORY = "ga_memory"   # the built-in ga_memory probe, its files embedded, its settings checked
    COMMAND = "command"       # the user's program (-- CMD) under the embedded command meter
    PROBE = "probe"           # any other Python probe: a built-in one or the user's script
    EXIT_CODE = "exit_code"   # --probe-cmd: the command, judged by its exit code


def kind(config: JobConfig) -> Kind:
    probe = config.probe
    if probe.exit_code_mode:
        return Kind.EXIT_CODE
    if probe.command:
        return Kind.COMMAND
    return Kind.GA_MEMORY if probe.name == GA_MEMORY else Kind.PROBE


def command_words(config: JobConfig) -> list[str]:
    """The words of the user's program (what followed ``--``)."""
    return list(config.probe.command)


def exit_code_words(config: JobConfig) -> list[str]:
    """The exit-code probe's command as the bisect ran it (an argument list, no shell)."""
    return config.probe.argv(Path("python"))


def meter_args(config: JobConfig) -> list[str]:
    """The command meter's own flags (before its ``--``)."""
    return config.probe.meter_args()


def probe_args(config: JobConfig) -> list[str]:
    """A Python probe's arguments."""
    return list(config.probe.args)


def probe_script(config: JobConfig) -> Path:
    """A Python probe's script (checked to exist)."""
    return config.probe.script()


def kind_is_builtin(config: JobConfig) -> bool:
    """The probe is one of bisector's own (its files are embedded byte for byte; a user's are masked)."""
    return config.probe.name is not None


def probe_script_files(config: JobConfig) -> list[Path]:
    """A Python probe's script and its helper modules (a built-in probe's files; a user's script alone)."""
    script = probe_script(config)
    return builtin_files(script) if kind_is_builtin(config) else [script]


def workdir(config: JobConfig) -> Optional[Path]:
    """The directory the user's program ran in (a command run's); None for a probe run in a scratch one."""
    return Path(config.probe.cwd).expanduser() if config.probe.command and config.probe.cwd else None


def builtin_probe_files(name: str) -> list[tuple[str, Path]]:
    """Built-in probe ``name``'s files, as (path relative to probes/, file), in order."""
    root = probes_dir()
    return sorted((f.relative_to(root).as_posix(), f) for f in builtin_files(builtin_script(name)))


def meter_probe_files() -> list[tuple[str, Path]]:
    """The command meter's files (probes/command and the meter library it uses)."""
    return builtin_probe_files(COMMAND_PROBE)


def verifying_probe(config: JobConfig, script: Path, exit_code: bool) -> ProbeSpec:
    """The probe that runs a written script in a fresh venv: ``python SCRIPT``, judged by its exit code (an
    exit-code repro) or by the result it writes to $BISECTOR_RESULT (in the directory the bisect's command ran
    in, for a command run's)."""
    timeout = config.probe.timeout
    if exit_code:
        return ProbeSpec(cmd=shlex.join(["python", str(script)]), timeout=timeout)
    return ProbeSpec(path=script, timeout=timeout, cwd=workdir(config))
