"""``bisector probe --with accelerate==0.22.0``: measure one version (build or reuse its env, run, store)."""
from __future__ import annotations

from bisector.bisection.pins import apply_pins
from bisector.cli.args import probe_overrides
from bisector.config import layer, validated
from bisector.core.measurement import Status
from bisector.core.units import human_value
from bisector.data import specs_dir
from bisector.envs import EnvManager, load_env_spec
from bisector.envs.spec import parse_pin
from bisector.errors import UsageError
from bisector.measure.gpus import GpuPool, detect_gpus, probe_cpus
from bisector.measure.measurer import Measurer
from bisector.measure.spec import ProbeSpec
from bisector.paths import default_cache_dir, default_store_path
from bisector.sources.index import find_release, list_releases, release_candidate
from bisector.sources.installer_config import resolve_index_url
from bisector.storage import Store


def probe_command(args) -> int:
    """Measure the first --with pin; further pins are companion packages (a torch pin is the base)."""
    try:
        name, version = parse_pin(args.with_[0])
    except ValueError as exc:
        raise UsageError(f"--with {exc}") from None
    spec = apply_pins(load_env_spec(args.env or "default", specs_dir()), args.with_[1:], name, args.index_url)
    release = find_release(list_releases(resolve_index_url(args.index_url), name), version)
    probe = validated(ProbeSpec, layer({"probe": {"name": "ga_memory"}}, {"probe": probe_overrides(args)})["probe"],
                      "command line")
    store = Store(args.store or default_store_path())
    gpus = detect_gpus()[:1]  # one probe: exactly one GPU, by UUID, when there are any
    measurer = Measurer(store, EnvManager(args.cache_dir or default_cache_dir()), spec, probe,
                        index_url=args.index_url, gpus=GpuPool(gpus), cpus=probe_cpus(1, gpus))
    m = measurer.measure(release_candidate(name, release))
    if args.json:
        print(m.model_dump_json(indent=2))
    else:
        stored = " (from the store)" if m.key in measurer.reused_keys else ""
        print(f"{name}=={release.version}: {m.status}{stored} in {m.seconds:.1f}s" + (f" — {m.reason}" if m.reason else ""))
        for key, value in sorted(m.metrics.items()):
            print(f"  {key:<40} {human_value(value, key)}")
    return 0 if m.status is Status.OK else 3
