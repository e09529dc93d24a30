"""The standalone repro script of a bisect (``bisector report --repro FILE``): what a maintainer runs
without bisector, in a fresh environment per side.

Its header names the step, both sides' pins, and each side's ``pip install`` and ``uv run --with``
line (only torch, the package under test at that side's version or commit, and the companions its
environment had): installable requirements only (a fact of the run, such as where torch came from, is a
comment), no path of this machine (a local clone is ``$REPO_URL``, which the header explains). What
follows depends on the probe:

* ``ga_memory``: the probe itself (bisector/data/repro/ga_memory_repro.py): its own files, the meter
  library's and the contract embedded exactly as the bisect ran them (bisector.repro.embed), run
  with the bisect's arguments on its device, the metric judged from its result; a run whose effective
  settings are not the bisect's (its results' ``probe.config``) is not judged;
* any other Python probe (built-in or a script): its source and its sibling modules embedded, run
  with this run's arguments, the metric read from its result and printed;
* an exit-code probe (``--probe-cmd``): a shell script running that command;
* a command run (``-- CMD``): the user's command under the embedded command meter
  (bisector/repro/kinds.py).

Every script prints the metric (or the exit code's meaning) and exits 0 for GOOD and 1 for BAD by the
run's criterion (an exit-code probe's own code), so ``git bisect run`` can use it too. Nothing in it
imports bisector; when bisector runs it (to verify it), the metrics also go to ``$BISECTOR_RESULT``.
"""
from __future__ import annotations

import pprint
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bisector.repro.kinds import command_script
from bisector.repro.embed import embedded, files_dict
from bisector.repro.header import IndexUse, header, index_use, installs, sides   # noqa: F401 (re-exported)
from bisector.bisection.wiring import job_spec
from bisector.job.config import JobConfig
from bisector.core.criterion import Compare, Direction
from bisector.core.result import BisectResult
from bisector.core.units import human_value
from bisector.data import repro_dir
from bisector.errors import UsageError
from bisector.job.probe_code import builtin_files
from bisector.report.common import result_metric
from bisector.safety.safe_text import one_line
from bisector.report.sides import shown
from bisector.sources.installer_config import resolve_index_url

_LOOP_FILE = {"accelerate": "ga_memory/_training/accelerate_loop.py", "trainer": "ga_memory/_training/trainer_loop.py"}
SETTING_KEYS = ("loop", "arch", "sizes", "seq_lens", "layers", "heads", "vocab", "max_positions", "batch", "precisions",
                "ga", "optimizer", "gradient_checkpointing", "use_reentrant", "use_cache", "attn", "shape",
                "shape_hidden", "model_factory", "zero_grad_target", "zero_grad_policy", "max_grad_norm",
                "lr_scheduler", "precision_via", "warmup_steps", "seed", "threads", "device")


@dataclass(frozen=True)
class ReproScript:
    """The script's text and what verifying it compares: the metric, the threshold it judges by, the
    direction, and whether it is a shell script (an exit-code probe's)."""

    text: str
    metric: Optional[str]
    threshold: Optional[float]
    direction: Direction
    shell: bool = False


def _threshold(s: BisectResult, config: JobConfig) -> Optional[float]:
    """What the script judges by: the run's (calibrated) threshold; in stats mode, midway between the
    boundary's medians (one run of a script is one sample, not a test)."""
    if config.criterion.compare is Compare.STATS:
        if s.last_good.value is None or s.first_bad.value is None:
            return None
        return (s.last_good.value + s.first_bad.value) / 2
    return s.threshold if s.threshold is not None else config.criterion.threshold


def _expect(s: BisectResult, metric: Optional[str], threshold: Optional[float], direction: Direction) -> str:
    if metric is None:
        return "exit 0 (GOOD) at last good, another exit code from 1 to 127 except 125 (BAD) at first bad."
    side = ">" if direction is Direction.INCREASE else "<"
    values = [human_value(p.value, metric) if p.value is not None else "?" for p in (s.last_good, s.first_bad)]
    return (f"{metric} {values[0]} at last good (GOOD), {values[1]} at first bad (BAD); BAD when {side} "
            f"{human_value(threshold, metric)}. Exit 0 when GOOD, 1 when BAD.")


def _replace(text: str, name: str, lines: list[str]) -> str:
    start, end = text.index(f"# >>> {name}\n"), None
    end = text.index("# <<<\n", start) + len("# <<<\n")
    return text[:start] + "\n".join(lines) + "\n" + text[end:]


def ga_memory_script(result: BisectResult, config: JobConfig, head: list[str], metric: str, threshold: float,
                     direction: Direction) -> str:
    """The ga_memory probe itself, embedded, run with the bisect's arguments on its device (see the module)."""
    settings = shown(result).probe.config or {}
    device = settings.get("device") or ("cuda" if "cuda" in (shown(result).last_good.env.meter or "") else "cpu")
    bisect = {k: settings[k] for k in SETTING_KEYS if k in settings}
    text = (repro_dir() / "ga_memory_repro.py").read_text()
    text = _replace(text, "header", head)
    text = _replace(text, "settings", [
        f"ARGS = {list(config.probe.args)!r}   # the bisect's probe arguments", f"DEVICE = {device!r}",
        f"# what measures: the loop in FILES[{_LOOP_FILE.get(settings.get('loop'), _LOOP_FILE['accelerate'])!r}], "
        f"the meter in FILES[{'_meters/cuda.py' if device == 'cuda' else '_meters/cpu.py'!r}]",
        f"METRIC, THRESHOLD, DIRECTION = {metric!r}, {threshold!r}, {direction.value!r}",
        "# the bisect's effective settings, as its results said (a run in another is not judged)",
        f"BISECT_SETTINGS = {pprint.pformat(bisect, width=110, sort_dicts=False)}"])
    return _replace(text, "files", files_dict("ga_memory", "the probe's files as the bisect ran them (see above)"))


def _in_docstring(text: Optional[str]) -> str:
    """``text`` fit for the script's docstring: on one line, no quote or backslash that could end it."""
    return one_line(str(text).replace("\\", "/").replace('"', "'"))


def bundle_script(config: JobConfig, head: list[str], metric: Optional[str], threshold: Optional[float],
                  direction: Direction, package: str) -> str:
    """A Python probe with its sibling modules embedded, run with the run's arguments (see the module)."""
    script = config.probe.script()
    files = builtin_files(script) if config.probe.name else [script]
    siblings = {f.stem: embedded(f) for f in files if f != script}
    modules = "\n".join(f"    {name!r}: {src}," for name, src in sorted(siblings.items()))
    env = {"BISECTOR_PACKAGE": package, "BISECTOR_DEVICE": "cpu", "BISECTOR_CPUS": "1"}
    return "\n".join([
        "#!/usr/bin/env python3", *head,
        f'"""Runs the probe {_in_docstring(Path(config.probe.label()).name)} (embedded below) with this run\'s arguments and '
        f'prints {_in_docstring(metric)}."""',
        "import base64", "import json", "import os", "import sys", "import tempfile", "import types", "",
        f"ARGS = {config.probe.args!r}", f"METRIC, THRESHOLD, DIRECTION = {metric!r}, {threshold!r}, {direction.value!r}",
        f"ENV = {env!r}   # what bisector told the probe (set only where the environment does not say)",
        "MODULES = {   # the probe's own helper modules", modules, "}",
        f"PROBE = {embedded(script)}", "", "",
        "def main():",
        "    for name, source in MODULES.items():",
        "        module = types.ModuleType(name)",
        "        exec(compile(source, f'{name}.py', 'exec'), module.__dict__)",
        "        sys.modules[name] = module",
        "    for key, value in ENV.items():",
        "        os.environ.setdefault(key, value)",
        "    with tempfile.TemporaryDirectory() as tmp:",
        "        result = os.environ.setdefault('BISECTOR_RESULT', os.path.join(tmp, 'result.json'))",
        f"        sys.argv = [{script.name!r}, *ARGS]",
        "        try:",
        f"            exec(compile(PROBE, {script.name!r}, 'exec'), {{'__name__': '__main__', "
        f"'__file__': os.path.join(tmp, {script.name!r})}})",
        "        except SystemExit as exc:",
        "            if exc.code not in (None, 0):",
        "                raise",
        "        with open(result) as fh:",
        "            found = json.load(fh)['metrics']",
        "    value = found[METRIC]",
        "    bad = value > THRESHOLD if DIRECTION == 'increase' else value < THRESHOLD",
        "    side = '>' if DIRECTION == 'increase' else '<'",
        "    print(f\"{METRIC} = {value:.6g}: {'BAD' if bad else 'GOOD'} (BAD when {side} {THRESHOLD:.6g})\")",
        "    return 1 if bad and result.startswith(tmp) else 0   # run by bisector: it judges the result file",
        "", "",
        "if __name__ == '__main__':", "    sys.exit(main())", ""])


def shell_script(config: JobConfig, head: list[str], package: str) -> str:
    """The exit-code probe's command (see the module)."""
    command = shlex.join(config.probe.argv(Path("python")))
    return "\n".join(["#!/bin/sh", *head,
                      "# Exit code (git bisect run's contract): 0 GOOD, 125 SKIP, other 1-127 BAD.",
                      "# Run it from the directory the bisect ran in (the command's paths are its).",
                      f"export BISECTOR_PACKAGE={shlex.quote(package)}", f"exec {command}", ""])


def printed_index(config: JobConfig) -> IndexUse:
    """The indexes the bisect's environments were built from, as the header's install lines name them: the
    job's ``--index-url`` (else its env spec's, else the installers' configured default) and the spec's
    extra indexes."""
    spec = job_spec(config)
    return index_use(resolve_index_url(config.job.index_url or spec.index_url), list(spec.extra_index_urls))


def repro_script(result: BisectResult, config: JobConfig, name: str) -> ReproScript:
    """The repro script of ``result`` (a stored bisect run with ``config``), to be saved as ``name``."""
    s, _, _ = sides(result)
    metric, direction = result_metric(s), config.criterion.direction
    shell = config.probe.exit_code_mode
    threshold = None if shell else _threshold(s, config)
    if not shell and (metric is None or threshold is None):
        raise UsageError(f"run {result.run_id} judges no metric against a threshold: nothing for a script to print")
    head = header(result, name, _expect(s, None if shell else metric, threshold, direction), config.job.repo, shell,
                  printed_index(config))
    if shell:
        text = shell_script(config, head, s.package)
    elif config.probe.command:
        device = "cuda" if "cuda" in (s.last_good.env.meter or "") else "cpu"
        text = command_script(config, head, metric, threshold, direction, s.package, device)
    elif config.probe.name == "ga_memory":
        text = ga_memory_script(result, config, head, metric, threshold, direction)
    else:
        text = bundle_script(config, head, metric, threshold, direction, s.package)
    return ReproScript(text, None if shell else metric, threshold, direction, shell)
