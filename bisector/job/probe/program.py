"""A user's own program (``bisector run ... -- CMD``): run unchanged under the command meter (the built-in
probe ``command``), from the directory bisector was started in, measured per optimizer step."""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import ClassVar, Literal, Optional

from pydantic import model_validator

from bisector.core.measurement import Measurement
from bisector.core.strict_numbers import numbers
from bisector.errors import UsageError
from bisector.redact import mask_words
from bisector.safety.safe_text import command_as
from bisector.job.probe.base import ProbeBase
from bisector.job.probe.builtin import PROGRAM_METER, builtin_script, code_files
from bisector.job.probe.program_inputs import hash_inputs
from bisector.job.probe.program_metrics import computed_number, fake_refused, steps_left_out, unknown_metric

DEFAULT_METRIC = "step_peak_bytes"


def _check_program(program: str, cwd: Optional[Path]) -> None:
    """A command's program, as far as it can be known before an environment is built: a path must be an
    executable file (relative to where the command runs). A bare name is found when the command runs (the
    environment's bin first on PATH, then its console scripts, then PATH): a console script only the candidate
    installs (``llamafactory-cli``) is not missing before it is built; a name the environment lacks too is
    then that measurement's environment failure, saying so (probes/command)."""
    if "/" in program:
        path = Path(program) if os.path.isabs(program) else (cwd or Path.cwd()) / program
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise UsageError(f"the command's program {program} is not an executable file")
    elif not program.strip():
        raise UsageError("the command's program is an empty word (-- python train.py)")


class ProgramProbe(ProbeBase):
    """``command``: the user's program and its arguments, run where bisector was started (``cwd``) with the
    command meter injected; ``measure_skip`` optimizer steps left out as warm-up; ``meter``: tensors (exact
    live tensor bytes on the CPU) or rss (RSS and time only); ``fake``: the program runs on fake tensors (torch's
    FakeTensorMode, entered when it imports torch: nothing allocated, the meter ``cpu-dispatch (fake)``)."""

    kind: ClassVar[str] = "program"
    kind_label: ClassVar[str] = "your program"
    repro_kind: ClassVar[str] = "command"
    metric_without_rule: ClassVar[bool] = True

    command: list[str]
    measure_skip: int = 1
    meter: Literal["tensors", "rss"] = "tensors"
    fake: bool = False

    _counts = numbers("measure_skip")

    @model_validator(mode="after")
    def _a_program(self) -> "ProgramProbe":
        if not self.command:
            raise ValueError("the command probe measures a program: give it after -- (bisector run ... -- python "
                             "train.py) or as command = [...]")
        if self.args:
            raise ValueError("a command (-- CMD) takes no probe arguments: its own arguments follow it")
        if self.measure_skip < 0:
            raise ValueError("measure_skip must be >= 0")
        if self.fake and self.meter != "tensors":
            raise ValueError("--fake counts fake tensors' bytes: it takes the tensors meter, not --meter rss")
        return self

    @classmethod
    def _stored_name(cls) -> Optional[str]:
        return PROGRAM_METER

    def script(self) -> Path:
        return builtin_script(PROGRAM_METER)

    def files(self) -> list[tuple[str, Path]]:
        return code_files(self.script())

    def meter_args(self) -> list[str]:
        """The command meter's own flags (before the ``--`` and the user's command)."""
        return ["--measure-skip", str(self.measure_skip), "--meter", self.meter, *(["--fake"] if self.fake else [])]

    def argv(self, python: Path) -> list[str]:
        return [str(python), str(self.script()), *self.meter_args(), "--", *self.command]

    def label(self) -> str:
        """'your program: python train.py --lr 1e-3', on one line, its secrets masked."""
        return f"{self.kind_label}: {command_as(mask_words(self.command))}"

    @property
    def workdir(self) -> Path:
        """Where the program runs (and its repro): the directory bisector was started in."""
        return Path(self.cwd).expanduser() if self.cwd is not None else Path.cwd()

    @property
    def default_metric(self) -> str:
        return DEFAULT_METRIC

    def known_metric(self, name: Optional[str]) -> Optional[str]:
        if name and self.fake and computed_number(name):
            return (f"--fake runs the program on fake tensors, which carry no values: {name} cannot be read "
                    f"(fake mode measures bytes; run without --fake for the program's numbers)")
        return unknown_metric(name) if name else None

    def computed_number(self, name: Optional[str]) -> bool:
        return computed_number(name)

    def bad_input(self, m: Measurement) -> Optional[str]:
        return steps_left_out(m) or fake_refused(m)

    def check(self, device: str) -> None:
        _check_program(self.command[0], self.workdir)
        if self.fake and device == "cuda":   # its results would be SKIPs: measured on another device than the run's
            raise UsageError("--fake counts fake tensors on the CPU, and this run measures on CUDA (a GPU is here): "
                             "run it with CUDA_VISIBLE_DEVICES= to measure on the CPU")

    def settle(self) -> None:
        if self.cwd is None:
            self.cwd = Path.cwd()

    def _fingerprint_more(self, h) -> None:
        """The program's words, the meter's settings and the files and directories the words name."""
        h.update(json.dumps({"command": self.command, "meter": self.meter_args()}).encode())
        with contextlib.suppress(OSError, ValueError):
            hash_inputs(h, self.command, self.workdir)

    def flag_words(self) -> list[str]:
        defaults = ProgramProbe.model_fields
        words = ["--measure-skip", str(self.measure_skip)] if self.measure_skip != defaults["measure_skip"].default else []
        return words + (["--meter", self.meter] if self.meter != defaults["meter"].default else []) + (
            ["--fake"] if self.fake else [])

    def program(self) -> list[str]:
        return list(self.command)

    def with_args(self, extra: list[str], env: Optional[dict[str, str]] = None) -> ProbeBase:
        """A program's extra arguments follow its own words (it takes no probe arguments)."""
        return self.model_copy(update={"command": [*self.command, *extra], "env": {**self.env, **(env or {})}})

    def relocated(self, script: Path) -> ProbeBase:
        return self   # the meter runs from bisector's own probes on every node
