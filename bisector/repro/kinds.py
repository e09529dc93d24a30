"""The repro script of a command run (``bisector run ... -- python train.py``): the user's command, unchanged,
under the command meter embedded in the script (probes/command with the probes' meter library), so a
maintainer gets the same numbers without bisector.

    good/bin/python repro.py              # the bisect's command, from the directory it ran in
    good/bin/python repro.py -- CMD ...   # any other command, measured the same way

It writes the meter's files to a temporary directory, runs the command through it with this interpreter's
``bin`` first on ``PATH`` (so ``python``, ``torchrun`` and ``accelerate`` are the environment's), prints the
metrics and the per-step values, and exits 0 for GOOD and 1 for BAD by the run's criterion (125 when the
metric could not be measured: ``git bisect run``'s skip). Run by bisector to verify it, the metrics go to
``$BISECTOR_RESULT`` too. Nothing in it imports bisector.
"""
from __future__ import annotations

from bisector.job.config import JobConfig
from bisector.core.criterion import Direction
from bisector.repro.embed import files_dict, probe_files
from bisector.job.probe_spec import COMMAND_PROBE

_BODY = '''

def _human(value, metric):
    if metric.endswith("_seconds") or ".rank" in metric and metric.split(".")[0].endswith("_seconds"):
        return f"{value:.4f} s"
    if "bytes" in metric:
        return f"{value / 2**20:.2f} MiB ({int(value)} B)"
    return f"{value:g}"


def main(argv):
    command = argv[argv.index("--") + 1:] if "--" in argv else COMMAND
    if not command:
        sys.exit("repro: no command after --")
    with tempfile.TemporaryDirectory(prefix="bisector-repro-") as tmp:
        for rel, source in FILES.items():
            path = os.path.join(tmp, *rel.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(source if isinstance(source, bytes) else source.encode("utf-8"))
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        for key, value in ENV.items():
            env.setdefault(key, value)
        result = env.setdefault("BISECTOR_RESULT", os.path.join(tmp, "result.json"))
        code = subprocess.call([sys.executable, os.path.join(tmp, "command", "__main__.py"), *METER_ARGS, "--",
                                *command], env=env)
        if code != 0:
            print(f"the command exited {code}: nothing measured", file=sys.stderr)
            return code if 0 < code < 128 else 1
        with open(result) as fh:
            found = json.load(fh)
    if found.get("error"):
        print(f"not measured: {found['error']}", file=sys.stderr)
        return 125
    metrics = found["metrics"]
    print(f"measured {shlex.join(command)}: meter {found.get('meter')}, device {found.get('device', {}).get('type')}, "
          f"torch {found.get('versions', {}).get('torch')}, {metrics.get('optimizer_steps', 0):g} optimizer steps, "
          f"the first {found.get('measure_skip')} left out; metrics over {found.get('scope')}")
    for name, value in metrics.items():
        print(f"  {name:<32} {_human(value, name)}")
    peaks = [s.get("peak_bytes", s.get("cuda_peak_allocated")) for s in found.get("steps", [])]
    if any(p is not None for p in peaks):
        print("  per step (peak bytes):", ", ".join("-" if p is None else str(p) for p in peaks))
    if "--" in argv:
        return 0
    value = metrics.get(METRIC)
    if value is None:
        print(f"{METRIC} not measured: {found.get('absent', {}).get(METRIC, 'absent')}", file=sys.stderr)
        return 125
    bad = value > THRESHOLD if DIRECTION == "increase" else value < THRESHOLD
    side = ">" if DIRECTION == "increase" else "<"
    print(f"{METRIC} = {value:.6g}: {'BAD' if bad else 'GOOD'} (BAD when {side} {THRESHOLD:.6g})")
    return 1 if bad and result.startswith(tmp) else 0   # run by bisector: it judges the result file


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''


def meter_files() -> dict[str, str]:
    """The command meter's files as the script embeds them: relative path under probes/ -> source."""
    return {rel: f.read_text() for rel, f in probe_files(COMMAND_PROBE)}


def command_script(config: JobConfig, head: list[str], metric: str, threshold: float, direction: Direction,
                   package: str, device: str) -> str:
    """The command run's repro (see the module): the header, the command, the meter's files, the judge."""
    probe = config.probe
    env = {"BISECTOR_PACKAGE": package, "BISECTOR_DEVICE": device}
    return "\n".join([
        "#!/usr/bin/env python3", *head,
        "# Run it from the directory the bisect ran in (the command's paths are relative to it).",
        f'"""Runs {probe.label().removeprefix("command: ")!r} unchanged under the command meter embedded below '
        f'and judges {metric} (python SCRIPT -- CMD measures any other command)."""',
        "import base64", "import json", "import os", "import shlex", "import subprocess", "import sys", "import tempfile",
        "",
        f"COMMAND = {list(probe.command)!r}",
        f"METER_ARGS = {probe.meter_args()!r}",
        f"METRIC, THRESHOLD, DIRECTION = {metric!r}, {threshold!r}, {direction.value!r}",
        f"ENV = {env!r}   # what bisector told the command (set only where the environment does not say)",
        *files_dict(COMMAND_PROBE, "the command meter (probes/command) and the probes' meter library, as bisector ran "
                                   "them"), _BODY])
