"""The standalone repro script of a bisect (``bisector report --repro FILE``): what a maintainer runs
without bisector, in a fresh environment per side.

Its header names the step, both sides' pins, and each side's ``pip install`` and ``uv run --with``
line (only torch, the package under test at that side's version or commit, and the companions its
environment had): installable requirements only (a fact of the run, such as where torch came from, is a
comment), no path of this machine (a local clone is ``$REPO_URL``, which the header explains). What
follows depends on the probe:

* ``ga_memory``: the probe's measured loop reduced to this run's setting (bisector/data/repro/
  ga_memory_repro.py with only the run's loop and meter kept, and its effective configuration as
  ``SETTINGS``): models from configs with random weights, the precision proved per cell, the CPU's
  live-bytes meter inlined (on CUDA ``torch.cuda.max_memory_allocated``), the fits and the metric;
* any other Python probe (built-in or a script): its source and its sibling modules embedded, run
  with this run's arguments, the metric read from its result and printed;
* an exit-code probe (``--probe-cmd``): a shell script running that command;
* a command run (``-- CMD``): the user's command under the embedded command meter
  (bisector/bisection/repro_command.py).

Every script prints the metric (or the exit code's meaning) and exits 0 for GOOD and 1 for BAD by the
run's criterion (an exit-code probe's own code), so ``git bisect run`` can use it too. Nothing in it
imports bisector; when bisector runs it (to verify it), the metrics also go to ``$BISECTOR_RESULT``.
"""
from __future__ import annotations

import ast
import base64
import pprint
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bisector.bisection.repro_command import command_script
from bisector.bisection.repro_header import IndexUse, header, index_use, installs, sides   # noqa: F401 (re-exported)
from bisector.bisection.wiring import job_spec
from bisector.job.config import JobConfig
from bisector.core.criterion import Compare, Direction
from bisector.core.result import BisectResult
from bisector.core.units import human_value
from bisector.data import repro_dir
from bisector.errors import UsageError
from bisector.job.probe_code import builtin_files
from bisector.report.common import result_metric
from bisector.safety.safe_text import one_line, visible
from bisector.report.sides import shown
from bisector.sources.installer_config import resolve_index_url

GA_MEMORY_METRIC = re.compile(r"^(peak_bytes\.[a-z0-9]+\.ga\d+\.h\d+(\.t\d+)?|((fp32|bf16|fp16)_)?(ga_cost|ga_excess|"
                              r"mixed_cost)_(bytes_per_param|fixed_bytes|bytes_per_token))$")
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


def _sections(template: str, keep: dict[str, str]) -> str:
    """The template without the ``# >>> key=value`` sections ``keep`` does not name (and without markers)."""
    out, dropping = [], False
    for line in template.splitlines():
        marker = re.match(r"^# >>> (\w+)=(\w+)$", line)
        if marker:
            dropping = keep.get(marker[1]) != marker[2]
            continue
        if line == "# <<<":
            dropping = False
            continue
        if not dropping:
            out.append(line)
    return "\n".join(out) + "\n"


def _replace(text: str, name: str, lines: list[str]) -> str:
    start, end = text.index(f"# >>> {name}\n"), None
    end = text.index("# <<<\n", start) + len("# <<<\n")
    return text[:start] + "\n".join(lines) + "\n" + text[end:]


def ga_memory_script(result: BisectResult, head: list[str], metric: str, threshold: float,
                     direction: Direction) -> str:
    """The ga_memory loop in the run's setting (see the module)."""
    config = (shown(result).probe or {}).get("config") or {}
    missing = [k for k in SETTING_KEYS if k not in config]
    if missing:
        raise UsageError(f"the run's ga_memory results do not say {', '.join(missing)}: rerun it with this bisector")
    if not GA_MEMORY_METRIC.match(metric):
        raise UsageError(f"the ga_memory repro computes the step peaks and the GA and mixed-precision costs, not {metric}")
    if config.get("fp16_init_scale") is not None:
        raise UsageError("the ga_memory repro does not set the fp16 GradScaler's initial scale (--fp16-init-scale)")
    settings = {k: config[k] for k in SETTING_KEYS}
    text = (repro_dir() / "ga_memory_repro.py").read_text()
    text = _replace(text, "header", head)
    text = _replace(text, "settings", [f"SETTINGS = {pprint.pformat(settings, width=110, sort_dicts=False)}",
                                       f"METRIC, THRESHOLD, DIRECTION = {metric!r}, {threshold!r}, {direction.value!r}"])
    return _sections(text, {"loop": settings["loop"], "meter": "cuda" if settings["device"] == "cuda" else "cpu"})


def _literal(source: str) -> str:
    """A Python string literal of exactly ``source``: readable when it can be (a raw triple-quoted string
    that reads back as ``source``, with no control, bidi or invisible character raw in it), else ``repr``
    (which escapes every quote, backslash and unprintable character)."""
    raw = "r'''" + source + "'''"
    if visible(source) == source and "\r" not in source:
        try:
            if ast.literal_eval(raw) == source:
                return raw
        except (SyntaxError, ValueError):
            pass
    return repr(source)


def embedded(path: Path) -> str:
    """A Python expression of a probe file's source, exactly as Python would run it: its UTF-8 text as a
    literal (:func:`_literal`; CRLF kept), or its bytes (base64) when it is not plain UTF-8 (another
    encoding, a BOM), which ``compile`` decodes as running the file would."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and not text.startswith("\ufeff"):
        return _literal(text)
    return f"base64.b64decode({base64.b64encode(data).decode()!r})"


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
        device = "cuda" if "cuda" in (s.last_good.env.get("meter") or "") else "cpu"
        text = command_script(config, head, metric, threshold, direction, s.package, device)
    elif config.probe.name == "ga_memory":
        text = ga_memory_script(result, head, metric, threshold, direction)
    else:
        text = bundle_script(config, head, metric, threshold, direction, s.package)
    return ReproScript(text, None if shell else metric, threshold, direction, shell)
