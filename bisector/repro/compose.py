"""The standalone repro script of a bisect (``bisector report --repro FILE``): what a maintainer runs without
bisector, in a fresh environment per side.

Its header (bisector.repro.header) names the step, both sides' pins and install lines (installable
requirements only; no path of this machine: a local clone is ``$REPO_URL``). What follows is the template of
the probe's kind (bisector.repro.probe_view.Kind: ga_memory, a command run, any other Python probe, an
exit-code command), filled with the run's settings as Python literals (bisector.repro.template,
bisector.repro.kinds). A command run's script also carries the files the command names
(bisector.repro.carry) and its header says what it cannot carry.

Every script prints the metric (or the exit code's meaning) and exits 0 for GOOD and 1 for BAD by the run's
criterion (an exit-code probe's own code), so ``git bisect run`` can use it too; an argument it does not take
is a one-line error (exit 2). Nothing in it imports bisector; when bisector runs it (to verify it), the metrics
also go to ``$BISECTOR_RESULT``. Its text is masked part by part as it is made (the header's lines, every
setting's strings, a user's files), never as a whole: the files it embeds are written back byte for byte.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from bisector.bisection.wiring import job_spec
from bisector.core.criterion import Compare, Direction
from bisector.core.result import BisectResult
from bisector.core.units import human_value
from bisector.errors import UsageError
from bisector.job.config import JobConfig
from bisector.repro import kinds, probe_view
from bisector.repro.carry import Carry, carry, header_lines
from bisector.repro.header import IndexUse, header, index_use, sides
from bisector.repro.probe_view import Kind
from bisector.repro.template import comments, fill
from bisector.report.common import result_metric
from bisector.sources.installer_config import resolve_index_url


@dataclass(frozen=True)
class ReproScript:
    """The script's text and what verifying it compares: the metric, the threshold it judges by, the
    direction, whether it is judged by its exit code (an exit-code probe's), and what it could not carry."""

    text: str
    metric: Optional[str]
    threshold: Optional[float]
    direction: Direction
    exit_code: bool = False
    left_out: list[str] = field(default_factory=list)


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


def printed_index(config: JobConfig) -> IndexUse:
    """The indexes the bisect's environments were built from, as the header's install lines name them: the
    job's ``--index-url`` (else its env spec's, else the installers' configured default) and the spec's
    extra indexes."""
    spec = job_spec(config)
    return index_use(resolve_index_url(config.job.index_url or spec.index_url), list(spec.extra_index_urls))


def repro_script(result: BisectResult, config: JobConfig, name: str) -> ReproScript:
    """The repro script of ``result`` (a stored bisect run with ``config``), to be saved as ``name``."""
    s, _, _ = sides(result)
    kind = probe_view.kind(config)
    metric, direction = result_metric(s), config.criterion.direction
    exit_code = kind is Kind.EXIT_CODE
    threshold = None if exit_code else _threshold(s, config)
    if not exit_code and (metric is None or threshold is None):
        raise UsageError(f"run {result.run_id} judges no metric against a threshold: nothing for a script to print")
    carried = carry(probe_view.command_words(config), probe_view.workdir(config)) if kind is Kind.COMMAND else Carry()
    head = header(result, name, _expect(s, None if exit_code else metric, threshold, direction), config.job.repo,
                  printed_index(config), header_lines(carried, name) if kind is Kind.COMMAND else [])
    if kind is Kind.EXIT_CODE:
        parts = kinds.exit_code_parts(config, s.package)
    elif kind is Kind.COMMAND:
        device = "cuda" if "cuda" in (s.last_good.env.meter or "") else "cpu"
        parts = kinds.command_parts(config, metric, threshold, direction, s.package, device, carried)
    elif kind is Kind.GA_MEMORY:
        parts = kinds.ga_memory_parts(result, config, metric, threshold, direction)
    else:
        parts = kinds.probe_parts(config, metric, threshold, direction, s.package)
    text = fill(f"{kind.value}_repro.py", {"header": comments(head), **parts}, s.units or result.units)
    return ReproScript(text, None if exit_code else metric, threshold, direction, exit_code, list(carried.left_out))
