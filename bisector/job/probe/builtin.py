"""A built-in probe (``--probe NAME``): a script or package in probes/, shipped with bisector."""
from __future__ import annotations

import ast
import os
import sys
from pathlib import Path
from typing import ClassVar, Optional

from pydantic import field_validator

from bisector.data import probes_dir
from bisector.errors import UsageError
from bisector.job.probe.base import ProbeBase
from bisector.job.probe_code import builtin_files
from bisector.process.procs import run_bounded

PREFLIGHT = "_preflight.py"        # a built-in probe package's own check of its arguments (stdlib only)
PREFLIGHT_TIMEOUT_S = 60
PROGRAM_METER = "command"          # the built-in probe that meters a user's program (the program kind runs it)
# the metric a criterion reads when the job names none, per built-in probe (the only place it is written)
DEFAULT_METRICS = {"ga_memory": "ga_excess_bytes_per_param", "step_time": "step_seconds",
                   "import_cost": "import_seconds"}


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


def code_files(script: Path) -> list[tuple[str, Path]]:
    """A built-in probe's files as (label relative to probes/, path): its own, the contract, the meter library."""
    root = probes_dir()
    return [(f.relative_to(root).as_posix() if f.is_relative_to(root) else f.name, f) for f in builtin_files(script)]


class BuiltinProbe(ProbeBase):
    """``name``: a built-in probe (probes/<name>.py or probes/<name>/), run with ``args``."""

    kind: ClassVar[str] = "builtin"
    kind_label: ClassVar[str] = "built-in"
    warm_capable: ClassVar[bool] = True

    name: str

    @field_validator("name")
    @classmethod
    def _not_the_meter(cls, value: str) -> str:
        if value == PROGRAM_METER:
            raise ValueError("the command probe measures a program: give it after -- (bisector run ... -- python "
                             "train.py) or as command = [...]")
        return value

    def script(self) -> Path:
        return builtin_script(self.name)

    def files(self) -> list[tuple[str, Path]]:
        return code_files(self.script())

    def argv(self, python: Path) -> list[str]:
        return [str(python), str(self.script()), *self.args]

    def label(self) -> str:
        return self.name

    @property
    def repro_kind(self) -> str:   # type: ignore[override]
        return "ga_memory" if self.name == "ga_memory" else "probe"   # ga_memory's repro checks its settings

    @property
    def default_metric(self) -> Optional[str]:
        return DEFAULT_METRICS.get(self.name)

    def check(self, device: str) -> None:
        """The script exists, and a probe package's own ``_preflight.py`` accepts its arguments on ``device``
        (and this machine can hold them)."""
        script = self.script()
        checker = script.parent / PREFLIGHT
        if script.name != "__main__.py" or not checker.is_file():
            return
        done = run_bounded([sys.executable, "-I", "-S", str(checker), *self.args],
                           {**os.environ, "BISECTOR_DEVICE": device}, timeout=PREFLIGHT_TIMEOUT_S)
        if done.returncode != 0:
            lines = [ln for ln in (done.stderr_tail or done.stdout_tail).splitlines() if ln.strip()]
            raise UsageError(f"probe {self.name} {' '.join(self.args)}: "
                             f"{lines[-1].strip() if lines else f'its check exited {done.returncode}'}")

    def flag_words(self) -> list[str]:
        return ["--probe", self.name]

    def relocated(self, script: Path) -> ProbeBase:
        from bisector.job.probe.script import ScriptProbe

        return ScriptProbe(path=script, args=self.args, timeout=self.timeout, cwd=self.cwd)
