"""Which probe a bisect runs, how to launch it inside a candidate environment, and its fingerprint."""
from __future__ import annotations

import ast
import hashlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, model_validator

from bisector.data import probes_dir
from bisector.core.strict_numbers import numbers
from bisector.errors import UsageError
from bisector.procs import run_bounded

CONTRACT = "_probe_contract.py"   # the shared result writer every built-in probe imports
PREFLIGHT = "_preflight.py"        # a built-in probe package's own check of its arguments (stdlib only)
PREFLIGHT_TIMEOUT_S = 60
SHELL_OPERATORS = set("();<>|&")


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


def builtin_files(script: Path) -> list[Path]:
    """The files a built-in probe's output depends on: its own (the whole directory of a probe
    package, or the one script) and the shared contract; never another probe's files."""
    own = sorted(script.parent.rglob("*.py")) if script.name == "__main__.py" else [script]
    contract = probes_dir() / CONTRACT
    return own + ([contract] if contract.is_file() else [])


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


class ProbeSpec(BaseModel):
    """Exactly one of: ``name`` (a built-in probe in probes/), ``path`` (a user's Python script
    writing ``{"metrics": ...}`` to $BISECTOR_RESULT) or ``cmd`` (exit-code contract:
    0 good, 125 skip, other 1-127 bad)."""

    model_config = ConfigDict(extra="forbid")

    name: Optional[str] = None
    path: Optional[Path] = None
    cmd: Optional[str] = None
    args: list[str] = []
    timeout: float = 1800.0

    _numbers = numbers("timeout")

    @model_validator(mode="after")
    def _one_kind(self) -> "ProbeSpec":
        given = [k for k in ("name", "path", "cmd") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of name, path, cmd" + (f" (got {', '.join(given)})" if given else ""))
        if self.timeout <= 0:
            raise ValueError("timeout must be positive")
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
        return [str(python), str(self.script()), *self.args]

    def fingerprint(self) -> str:
        """Hash of what determines the probe's output: its code (with sibling helpers) and arguments."""
        h = hashlib.sha256()
        h.update(json.dumps({"cmd": self.cmd, "args": self.args}).encode())
        script = self.script()
        if script is not None:
            files = builtin_files(script) if self.name is not None else [script]
            root = script.parent
            for f in files:
                label = f.relative_to(root).as_posix() if f.is_relative_to(root) else f.name
                h.update(label.encode() + b"\0" + f.read_bytes())
        return h.hexdigest()[:16]

    def label(self) -> str:
        """How reports name the probe: its name, its path, or ``cmd: <command>``."""
        if self.cmd is not None:
            return f"cmd: {self.cmd}"
        return self.name or str(self.path)
