"""``bisector probe --with accelerate==0.22.0``: measure one version (build or reuse its environment,
run the probe, store the measurement) and print what it says, headline metrics first.

The probe and its arguments are the default job's unless ``--probe`` names another (the same
layering as ``bisector run``: ``--probe-arg`` adds to the job's arguments). ``--fresh`` measures
again under a new repeat number (the stored ones are kept); ``--explain`` adds where the bytes live
(the probe's explainer's single-version view); ``--all`` lists every metric.
"""
from __future__ import annotations

import json
import sys

from bisector.bisection.pins import apply_pins
from bisector.cli.overrides import probe_overrides, run_section
from bisector.job.layering import validated
from bisector.core.facts import ProbeResult
from bisector.core.measurement import Measurement, Status, absent_reason
from bisector.core.units import human_value
from bisector.data import specs_dir
from bisector.envs import load_env_spec
from bisector.core.requirements import parse_pin
from bisector.errors import UsageError
from bisector.explain.registry import compact_details, explainer_for
from bisector.job.jobfile import builtin_job, stack
from bisector.measure.assembly import build_engine, check_executor, probe_device
from bisector.measure.gpus import detect_gpus
from bisector.decide.judge import refuse_bad_input
from bisector.job.probe import ProbeBase, probe_from
from bisector.paths import default_store_path
from bisector.console.live import progress_for, showing
from bisector.safety.safe_text import json_visible, one_line
from bisector.sources.index import find_release, list_releases, release_candidate
from bisector.sources.installer_config import resolve_index_url
from bisector.store.run_record import RunRecord
from bisector.store.storage import RunKind, RunRow, Store, now
from bisector.store.integrity import check_run_paths

SHOWN = 8   # metrics listed without --all


def _job_probe(args) -> tuple[ProbeBase, str | None]:
    """The probe (the default job's, with the flags over it) and the metric its criterion reads."""
    data = stack(builtin_job(), {"probe": probe_overrides(args), "criterion": {}}, append_args=True)
    probe = validated(probe_from, data["probe"], "command line")
    metric = args.metric or (data.get("criterion") or {}).get("metric") or probe.default_metric
    problem = probe.known_metric(metric)
    if problem:
        raise UsageError(problem)
    return probe, metric


def _header(name: str, version: str, m: Measurement, reused: bool, probe: ProbeBase) -> list[str]:
    when = f"from the store, measured {m.created[:19].replace('T', ' ')} (--fresh measures again)" if reused \
        else f"measured in {m.seconds:.1f}s"
    why = f" — {m.reason}" if m.reason else ""
    args = f" {' '.join(probe.args)}" if probe.args else ""
    result = m.result or ProbeResult()
    meter = f", meter {result.meter}" if result.meter else ""
    lines = [f"{name}=={version}: {m.status.value}, {when}{why}", f"  probe {probe.label()}{args}{meter}"]
    device = result.device
    if device.type == "cuda":
        facts = [device.gpu_label or "an unnamed GPU"]
        facts += [f"{label} {value}" for label, value in (("driver", device.driver), ("CUDA", device.cuda)) if value]
        lines.append(f"  on {', '.join(facts)}")
    return lines


def _metric_lines(m: Measurement, metric: str | None, everything: bool) -> list[str]:
    result = m.result or ProbeResult()
    explainer = explainer_for(result.schema_version, m.metrics, result.fields())
    names = explainer.headline(m.metrics, metric)
    rest = [k for k in sorted(m.metrics) if k not in names]
    shown = names + (rest if everything else [] if names else rest[:SHOWN])
    width = max((len(explainer.label(k)) for k in shown), default=0)
    lines = [f"  {explainer.label(k):<{width}}  {human_value(m.metrics[k], k):>16}  "
             f"{explainer.meaning(k)}".rstrip() for k in shown]
    why = absent_reason([m], metric) if metric and metric not in m.metrics else None
    if why:   # the metric asked for (a command's default) is left out: said, never silently missing
        lines.insert(0, f"  {metric}: not measured: {why}")
    hidden = len(m.metrics) - len(shown)
    if hidden > 0:
        lines.append(f"  ({hidden} more metrics: --all lists them, --json prints everything)")
    return lines


def _explained(m: Measurement, metric: str | None) -> list[str]:
    result = m.result or ProbeResult()
    explainer = explainer_for(result.schema_version, m.metrics, result.fields())
    return [f"  {line}" for line in explainer.one_version(m.metrics, compact_details(result.fields(), m.metrics),
                                                          metric)]


def probe_command(args) -> int:
    """Measure the first --with pin; further pins are companion packages (a torch pin is the base)."""
    try:
        name, version = parse_pin(args.with_[0])
    except ValueError as exc:
        raise UsageError(f"--with {exc}") from None
    spec = apply_pins(load_env_spec(args.env or "default", specs_dir()), args.with_[1:], name, args.index_url,
                      args.torch)
    release = find_release(list_releases(resolve_index_url(args.index_url), name), version)
    probe, metric = _job_probe(args)
    # a bad probe (a built-in probe's own check of its arguments), store or cache is one line before
    # anything is created
    run = run_section(args)
    check_executor(run.executor, run.ray_address)
    gpus = detect_gpus()
    probe.check(probe_device(run.executor, gpus))
    check_run_paths(run.store, run.cache_dir)
    store = Store(run.store or default_store_path())
    # one probe: exactly one GPU (by UUID) when there are any, else the cores --jobs leaves it
    engine = build_engine(run, store, max_gpus=1, gpus=gpus)
    measurer = engine.measurer(spec, probe, args.index_url)
    cand = release_candidate(name, release)
    started = now()
    with showing(progress_for()):
        stored = measurer.next_repeat(cand)   # a fresh measurement is the next repeat; else the newest stored one
        m = measurer.measure(cand, stored if args.fresh else max(stored - 1, 0))
    refuse_bad_input(probe.bad_input, [m])   # e.g. --measure-skip beyond the steps the command took: nothing saved
    reused = m.reused
    _save_run(store, started, name, release.version, m, reused, probe, metric, args.with_)
    if args.json:
        print(json_visible(m.model_dump_json(indent=2)))
        return 0 if m.status is Status.OK else 3
    print("\n".join(probe_lines(name, release.version, m, reused, probe, metric, args.all, args.explain)))
    return 0 if m.status is Status.OK else 3


def probe_lines(name: str, version: str, m: Measurement, reused: bool, probe: ProbeBase, metric: str | None,
                everything: bool = False, explain: bool = False) -> list[str]:
    """What ``bisector probe`` prints (and ``bisector report`` of a probe run, as text): each line shown by
    safe_text.one_line (the probe's reason, metric names and fields are the probe's text, not ours)."""
    lines = _header(name, version, m, reused, probe)
    lines += _metric_lines(m, metric, everything) + (_explained(m, metric) if explain else [])
    return [one_line(line) for line in lines]


def _save_run(store: Store, started: str, name: str, version: str, m: Measurement, reused: bool, probe: ProbeBase,
              metric: str | None, pins: list[str]) -> None:
    """The measurement as a run of kind ``probe`` (``bisector runs``, ``log`` and ``report`` list and show it)."""
    config = {"package": name, "version": version, "with": list(pins), "probe": probe.model_dump(mode="json"),
              "metric": metric}
    result = {"package": name, "version": version, "status": m.status.value, "measurement": m.key,
              "reused": reused, "metric": metric}
    RunRecord(store, RunKind.PROBE, ["bisector", *sys.argv[1:]], config, created=started).save(m.status.value, result)


def render_probe_run(store: Store, run: RunRow, fmt: str) -> str:
    """A stored probe run as text (what the command printed) or json (the run and its measurement)."""
    res = run.result or {}
    m = store.get_measurement(res.get("measurement", ""))
    if m is None:
        raise UsageError(f"run {run.id}: its measurement {res.get('measurement')!r} is not in {store.path}")
    if fmt == "json":
        return json.dumps({"run_id": run.id, "kind": run.kind.value, **res,
                           "measurement": m.model_dump(mode="json")}, indent=2)
    probe = probe_from(run.config.get("probe") or {"name": "ga_memory"})
    return "\n".join(probe_lines(res["package"], res["version"], m, bool(res.get("reused")), probe, res.get("metric")))
