"""Which probe a bisect runs, how to launch it inside a candidate environment, and its fingerprint."""
from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, model_validator

from bisector.data import probes_dir
from bisector.job.probe_code import builtin_files
from bisector.core.strict_numbers import numbers
from bisector.errors import UsageError
from bisector.process.procs import run_bounded
from bisector.redact import mask_words
from bisector.safety.safe_text import command_as

PREFLIGHT = "_preflight.py"        # a built-in probe package's own check of its arguments (stdlib only)
PREFLIGHT_TIMEOUT_S = 60
SHELL_OPERATORS = set("();<>|&")
COMMAND_PROBE = "command"   # the built-in probe that meters a user's own program (probes/command)
FINGERPRINTED_FILE_MAX = 16 << 20


def builtin_script(name: str) -> Path:
    """The script of built-in probe ``name``: ``probes/<name>.py`` or ``probes/<name>/__main__.py``."""
    root = probes_dir()
    if "/" in name or name.startswith(("_", ".")):
        raise UsageError(f"unknown probe '{name}' (built-in probes: {', '.join(builtin_names()) or 'none'})")
    for path in (root / f"{name}.py", root / name / "__main__.py"):
        if path.is_file():
            return path
    raise UsageError(f"unknown probe '{name}' (built-in probes: {', '.join(builtin_names()) or 'none'})")


def builtin_names() -> list[str]:
    """Every built-in probe's name."""
    root = probes_dir()
    files = [p.stem for p in root.glob("[!_]*.py")]
    packages = [p.name for p in root.iterdir() if (p / "__main__.py").is_file()] if root.is_dir() else []
    return sorted(files + packages)


def builtin_version(name: str) -> Optional[str]:
    """A built-in probe's version as its script declares it (``PROBE_VERSION`` or ``VERSION``), read
    with ``ast``: probes import torch, which bisector never imports."""
    tree = ast.parse(builtin_script(name).read_text())
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            names = [target] if isinstance(target, ast.Name) else getattr(target, "elts", [])
            values = [node.value] if isinstance(target, ast.Name) else getattr(node.value, "elts", [])
            for n, v in zip(names, values):
                if isinstance(n, ast.Name) and n.id in ("PROBE_VERSION", "VERSION") and isinstance(v, ast.Constant):
                    return str(v.value)
    return None


def _check_command(cmd: str) -> None:
    """An exit-code probe's command: parsed as a shell would split it, but run without one."""
    lexer = shlex.shlex(cmd, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError as exc:
        raise UsageError(f"--probe-cmd cannot be parsed: {exc}") from None
    if not words:
        raise UsageError("--probe-cmd is empty")
    operator = next((w for w in words if set(w) <= SHELL_OPERATORS), None)
    if operator is not None:
        raise UsageError(f"--probe-cmd {cmd!r} has shell syntax ({operator!r}), but it runs without a shell: "
                         f"--probe-cmd \"sh -c '...'\" runs one")
    program = shlex.split(cmd)[0]
    if "/" in program and not os.path.isabs(program):
        raise UsageError(f"--probe-cmd runs in a scratch directory: give {program} as an absolute path")
    if os.path.isabs(program) and not (os.path.isfile(program) and os.access(program, os.X_OK)):
        raise UsageError(f"--probe-cmd: {program} is not an executable file")


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


class ProbeSpec(BaseModel):
    """Exactly one of: ``name`` (a built-in probe in probes/), ``path`` (a user's Python script
    writing ``{"metrics": ...}`` to $BISECTOR_RESULT), ``cmd`` (exit-code contract: 0 good, 125 skip,
    other 1-127 bad) or ``command`` (a user's program run unchanged under the command meter,
    ``bisector run ... -- CMD``: the built-in probe ``command`` with the program's words after ``--``,
    run in ``cwd``, the directory bisector was started in)."""

    model_config = ConfigDict(extra="forbid")

    name: Optional[str] = None
    path: Optional[Path] = None
    cmd: Optional[str] = None
    command: list[str] = []
    measure_skip: int = 1
    meter: Literal["tensors", "rss"] = "tensors"
    cwd: Optional[Path] = None
    args: list[str] = []
    timeout: float = 1800.0

    _numbers = numbers("timeout", "measure_skip")

    @model_validator(mode="before")
    @classmethod
    def _command_is_a_probe(cls, data):
        """``command = [...]`` runs under the built-in probe ``command``."""
        if isinstance(data, dict) and data.get("command") and not data.get("name"):
            data = {**data, "name": COMMAND_PROBE}
        return data

    @model_validator(mode="after")
    def _one_kind(self) -> "ProbeSpec":
        given = [k for k in ("name", "path", "cmd") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of name, path, cmd, command"
                             + (f" (got {', '.join(given)})" if given else ""))
        if self.timeout <= 0:
            raise ValueError("timeout must be positive")
        if self.name == COMMAND_PROBE and not self.command:
            raise ValueError("the command probe measures a program: give it after -- (bisector run ... -- python "
                             "train.py) or as command = [...]")
        if self.command:
            if self.name != COMMAND_PROBE:
                raise ValueError(f"a command (-- CMD) runs under the command meter, not the probe {self.name}")
            if self.args:
                raise ValueError("a command (-- CMD) takes no probe arguments: its own arguments follow it")
            if self.measure_skip < 0:
                raise ValueError("measure_skip must be >= 0")
        elif self.measure_skip != 1 or self.meter != "tensors":   # (a stored config holds the defaults)
            raise ValueError("--measure-skip and --meter (measure_skip, meter) are for a program given after -- "
                             "(or as [probe] command = [...])")
        return self

    @model_validator(mode="after")
    def _path_expanded(self) -> "ProbeSpec":
        if self.path is not None and str(self.path).startswith("~"):
            self.path = self.path.expanduser()   # (a stored config holds the home directory as ~)
        return self

    @property
    def exit_code_mode(self) -> bool:
        """The probe is a command judged by its exit code (git bisect run's contract)."""
        return self.cmd is not None

    def script(self) -> Optional[Path]:
        """The Python script this probe runs, checked to exist."""
        if self.cmd is not None:
            return None
        if self.name is not None:
            return builtin_script(self.name)
        path = Path(self.path).expanduser().resolve()
        if not path.is_file():
            raise UsageError(f"probe script {self.path} not found")
        return path

    def check(self, device: str) -> None:
        """Everything about the probe that can be known before a run (a usage error otherwise): the script
        exists; a command parses, has no shell syntax and names a program that can exist; a built-in
        probe's own ``_preflight.py`` accepts its arguments on ``device`` (and this machine can hold them)."""
        if self.cmd is not None:
            _check_command(self.cmd)
            return
        if self.command:
            _check_program(self.command[0], self.workdir)
            return
        script = self.script()
        checker = script.parent / PREFLIGHT
        if self.name is None or script.name != "__main__.py" or not checker.is_file():
            return
        done = run_bounded([sys.executable, "-I", "-S", str(checker), *self.args],
                           {**os.environ, "BISECTOR_DEVICE": device}, timeout=PREFLIGHT_TIMEOUT_S)
        if done.returncode != 0:
            lines = [ln for ln in (done.stderr_tail or done.stdout_tail).splitlines() if ln.strip()]
            raise UsageError(f"probe {self.name} {' '.join(self.args)}: "
                             f"{lines[-1].strip() if lines else f'its check exited {done.returncode}'}")

    def argv(self, python: Path) -> list[str]:
        """The command run inside the environment (argument list, never a shell)."""
        if self.cmd is not None:
            try:
                words = shlex.split(self.cmd)
            except ValueError as exc:
                raise UsageError(f"--probe-cmd cannot be parsed: {exc}") from None
            if not words:
                raise UsageError("--probe-cmd is empty")
            return [*words, *self.args]
        if self.command:
            return [str(python), str(self.script()), *self.meter_args(), "--", *self.command]
        return [str(python), str(self.script()), *self.args]

    def meter_args(self) -> list[str]:
        """The command meter's own flags (before the ``--`` and the user's command)."""
        return ["--measure-skip", str(self.measure_skip), "--meter", self.meter]

    @property
    def workdir(self) -> Optional[Path]:
        """Where the probe runs: a command (and its repro) in the directory bisector was started in, others in
        a scratch one."""
        if self.cwd is not None:
            return Path(self.cwd).expanduser()
        return Path.cwd() if self.command else None

    def fingerprint(self) -> str:
        """Hash of what determines the probe's output: its code (with sibling helpers) and arguments."""
        h = hashlib.sha256()
        h.update(json.dumps({"cmd": self.cmd, "args": self.args}).encode())
        if self.command:   # the program's words, the meter's settings and the files the words name
            h.update(json.dumps({"command": self.command, "meter": self.meter_args()}).encode())
            for word in self.command[1:]:
                path = Path(word) if os.path.isabs(word) else (self.workdir or Path.cwd()) / word
                with contextlib.suppress(OSError, ValueError):
                    if path.is_file() and path.stat().st_size <= FINGERPRINTED_FILE_MAX:
                        h.update(word.encode() + b"\0" + path.read_bytes())
        script = self.script()
        if script is not None:
            files = builtin_files(script) if self.name is not None else [script]
            root = probes_dir() if self.name is not None else script.parent
            for f in files:
                label = f.relative_to(root).as_posix() if f.is_relative_to(root) else f.name
                h.update(label.encode() + b"\0" + f.read_bytes())
        return h.hexdigest()[:16]

    def label(self) -> str:
        """How reports name the probe: its name, its path, or ``cmd: <command>``."""
        if self.cmd is not None:
            return f"cmd: {self.cmd}"
        if self.command:
            return f"command: {command_as(mask_words(self.command))}"   # one line, secrets masked
        return self.name or str(self.path)
