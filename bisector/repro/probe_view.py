"""Every read of a job's probe the repro makes, in one place: which kind of script it gets, the words it runs,
its files, where it ran, and the probe that runs a written script when it is verified. (The probe's kinds live
in bisector.job.probe; each says which repro it gets, ``repro_kind``.)"""
from __future__ import annotations

import shlex
from enum import Enum
from pathlib import Path
from typing import Optional

from bisector.job.config import JobConfig
from bisector.job.probe import BuiltinProbe, ExitCodeProbe, ProbeBase, ProgramProbe, ScriptProbe


class Kind(str, Enum):
    """The repro script a probe gets (bisector/data/repro/<kind>_repro.py)."""

    GA_MEMORY = "ga_memory"   # the built-in ga_memory probe, its files embedded, its settings checked
    COMMAND = "command"       # the user's program (-- CMD) under the embedded command meter
    PROBE = "probe"           # any other Python probe: a built-in one or the user's script
    EXIT_CODE = "exit_code"   # --probe-cmd: the command, judged by its exit code


def kind(config: JobConfig) -> Kind:
    return Kind(config.probe.repro_kind)


def command_words(config: JobConfig) -> list[str]:
    """The words of the user's program (what followed ``--``)."""
    return config.probe.program()


def exit_code_words(config: JobConfig) -> list[str]:
    """The exit-code probe's command as the bisect ran it (an argument list, no shell)."""
    return config.probe.argv(Path("python"))


def meter_args(config: JobConfig) -> list[str]:
    """The command meter's own flags (before its ``--``)."""
    probe = config.probe
    return probe.meter_args() if isinstance(probe, ProgramProbe) else []


def probe_args(config: JobConfig) -> list[str]:
    """A Python probe's arguments."""
    return list(config.probe.args)


def probe_script(config: JobConfig) -> Path:
    """A Python probe's script (checked to exist)."""
    return config.probe.script()


def kind_is_builtin(config: JobConfig) -> bool:
    """The probe is one of bisector's own (its files are embedded byte for byte; a user's are masked)."""
    return isinstance(config.probe, BuiltinProbe)


def probe_script_files(config: JobConfig) -> list[Path]:
    """A Python probe's script and its helper modules (a built-in probe's files; a user's script alone)."""
    return [path for _, path in config.probe.files()]


def workdir(config: JobConfig) -> Optional[Path]:
    """The directory the user's program ran in (a command run's); None for a probe run in a scratch one."""
    return config.probe.workdir


def probe_files(config: JobConfig) -> list[tuple[str, Path]]:
    """The probe's files, as (path relative to probes/ for a built-in probe, file), in order."""
    return sorted(config.probe.files())


def meter_probe_files() -> list[tuple[str, Path]]:
    """The command meter's files (probes/command and the meter library it uses)."""
    return sorted(ProgramProbe(command=["python"]).files())


def verifying_probe(config: JobConfig, script: Path, exit_code: bool) -> ProbeBase:
    """The probe that runs a written script in a fresh venv: ``python SCRIPT``, judged by its exit code (an
    exit-code repro) or by the result it writes to $BISECTOR_RESULT (in the directory the bisect's command ran
    in, for a command run's)."""
    timeout = config.probe.timeout
    if exit_code:
        return ExitCodeProbe(cmd=shlex.join(["python", str(script)]), timeout=timeout)
    return ScriptProbe(path=script, timeout=timeout, cwd=workdir(config))
