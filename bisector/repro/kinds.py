"""Each kind's script (bisector.repro.probe_view.Kind): the settings its template (bisector/data/repro/
<kind>_repro.py) is filled with, every one a Python literal (bisector.repro.template.assign) with its strings
masked (bisector.redact), and the files it embeds.

* ``ga_memory``: the probe itself, its files embedded byte for byte, run with the bisect's arguments on its
  device; the bisect's effective settings travel with it (a run in others is not judged);
* ``command``: the user's command under the embedded command meter, with the files it names that can be
  carried (bisector.repro.carry);
* ``probe``: any other Python probe, its source (masked as the user's) and its helper modules embedded;
* ``exit_code``: the exit-code command, word for word, judged by its exit code.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from bisector.core.criterion import Direction
from bisector.core.result import BisectResult
from bisector.job.config import JobConfig
from bisector.redact import redact_text
from bisector.repro import probe_view
from bisector.repro.carry import Carry, carried_settings
from bisector.repro.embed import embedded, files_dict, literal
from bisector.repro.source_mask import masked
from bisector.repro.template import assign
from bisector.report.sides import shown

_LOOP_FILE = {"accelerate": "ga_memory/_training/accelerate_loop.py", "trainer": "ga_memory/_training/trainer_loop.py"}
SETTING_KEYS = ("loop", "arch", "sizes", "seq_lens", "layers", "heads", "vocab", "max_positions", "batch", "precisions",
                "ga", "optimizer", "gradient_checkpointing", "use_reentrant", "use_cache", "attn", "shape",
                "shape_hidden", "model_factory", "zero_grad_target", "zero_grad_policy", "max_grad_norm",
                "lr_scheduler", "precision_via", "warmup_steps", "seed", "threads", "device")


def data(value: Any) -> Any:
    """``value`` with every string in it masked (bisector.redact; the user's home kept: a path is a path)."""
    if isinstance(value, str):
        return redact_text(value, home=False)
    if isinstance(value, list):
        return [data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(data(v) for v in value)
    if isinstance(value, dict):
        return {data(k): data(v) for k, v in value.items()}
    return value


def setting(name: str, value: Any, comment: str = "") -> str:
    """A settings line: ``NAME = <literal>`` of ``value``, masked."""
    return assign(name, data(value), comment)


def _judge(metric: Optional[str], threshold: Optional[float], direction: Direction) -> str:
    return setting("METRIC, THRESHOLD, DIRECTION", (metric, threshold, direction.value))


def ga_memory_parts(result: BisectResult, config: JobConfig, metric: str, threshold: float,
                    direction: Direction) -> dict[str, list[str]]:
    settings = shown(result).probe.config or {}
    device = settings.get("device") or ("cuda" if "cuda" in (shown(result).last_good.env.meter or "") else "cpu")
    bisect = {k: settings[k] for k in SETTING_KEYS if k in settings}
    loop = _LOOP_FILE.get(settings.get("loop"), _LOOP_FILE["accelerate"])
    meter = "_meters/cuda.py" if device == "cuda" else "_meters/cpu.py"
    return {"settings": [
        setting("ARGS", probe_view.probe_args(config), "the bisect's probe arguments"), setting("DEVICE", device),
        f"# what measures: the loop in FILES[{loop!r}], the meter in FILES[{meter!r}]",
        _judge(metric, threshold, direction),
        "# the bisect's effective settings, as its results said (a run in another is not judged)",
        setting("BISECT_SETTINGS", bisect)],
        "files": files_dict(probe_view.probe_files(config),
                            "the probe's files as the bisect ran them (see above)")}


def command_parts(config: JobConfig, metric: str, threshold: float, direction: Direction, package: str,
                  device: str, carried: Carry) -> dict[str, list[str]]:
    env = {"BISECTOR_PACKAGE": package, "BISECTOR_DEVICE": device}
    return {"settings": [
        setting("COMMAND", probe_view.command_words(config), "the bisect's command, word for word"),
        setting("METER_ARGS", probe_view.meter_args(config)), _judge(metric, threshold, direction),
        setting("CRASH_IS_BAD", config.criterion.crash_is_bad, "the run's rule for a command that fails"),
        setting("ENV", env, "what bisector told the command (set only where the environment does not say)"),
        *carried_settings(carried)],
        "files": files_dict(probe_view.meter_probe_files(), "the command meter (probes/command) and the probes' meter "
                                                            "library, as bisector ran them")}


def _source(path: Path, own: bool) -> str:
    """A probe file as a literal: bisector's own byte for byte, a user's masked (its Python still parses)."""
    if not own:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, ValueError):
            text = None
        shown_text = masked(text, python=True) if text is not None else None
        if shown_text is not None:
            return literal(shown_text)
    return embedded(path)


def probe_parts(config: JobConfig, metric: Optional[str], threshold: Optional[float], direction: Direction,
                package: str) -> dict[str, list[str]]:
    script = probe_view.probe_script(config)
    own = probe_view.kind_is_builtin(config)
    siblings = {f.stem: _source(f, own) for f in probe_view.probe_script_files(config) if f != script}
    env = {"BISECTOR_PACKAGE": package, "BISECTOR_DEVICE": "cpu", "BISECTOR_CPUS": "1"}
    return {"settings": [
        setting("ARGS", probe_view.probe_args(config), "the bisect's probe arguments"),
        _judge(metric, threshold, direction),
        setting("ENV", env, "what bisector told the probe (set only where the environment does not say)"),
        setting("PROBE_NAME", script.name),
        "MODULES = {   # the probe's own helper modules: name -> source",
        *(f"    {name!r}: {src}," for name, src in sorted(siblings.items())), "}",
        f"PROBE = {_source(script, own)}   # the probe's source"]}


def exit_code_parts(config: JobConfig, package: str) -> dict[str, list[str]]:
    return {"settings": [
        setting("COMMAND", probe_view.exit_code_words(config), "the bisect's command, word for word"),
        setting("ENV", {"BISECTOR_PACKAGE": package}, "what bisector told the command (set only where the "
                                                      "environment does not say)")]}
