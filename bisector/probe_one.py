"""``bisector probe --with accelerate==0.22.0``: measure one version (build or reuse its env, run, store)."""
from __future__ import annotations

from .candidate import Candidate, CandidateKind
from .driver import ENVS_DIR
from .envs import EnvManager, load_env_spec
from .errors import UsageError
from .index import find_release, list_releases
from .installer_config import resolve_index_url
from .measure import Measurer
from .pins import apply_pins, parse_pin
from .paths import default_cache_dir, default_store_path
from .probe import ProbeSpec
from .store import Store
from .units import human_value


def probe_command(args) -> int:
    """Measure the first --with pin; further pins are companion packages (a torch pin is the base)."""
    try:
        name, version = parse_pin(args.with_[0])
    except ValueError as exc:
        raise UsageError(f"--with {exc}") from None
    spec = apply_pins(load_env_spec(args.env or "default", ENVS_DIR), args.with_[1:], name, args.index_url)
    release = find_release(list_releases(resolve_index_url(args.index_url), name), version)
    cand = Candidate(package=name, kind=CandidateKind.RELEASE, ref=release.version, date=release.uploaded)
    probe = ProbeSpec(name=args.probe or "ga_memory", args=args.probe_args or []) if not (
        args.probe and args.probe.endswith(".py")) else ProbeSpec(path=args.probe, args=args.probe_args or [])
    store = Store(args.store or default_store_path())
    cache = args.cache_dir or default_cache_dir()
    measurer = Measurer(store, EnvManager(cache / "envs"), spec, probe, index_url=args.index_url)
    m = measurer.measure(cand)
    if args.json:
        print(m.model_dump_json(indent=2))
    else:
        stored = " (from the store)" if m.key in measurer.reused_keys else ""
        print(f"{name}=={release.version}: {m.status}{stored} in {m.seconds:.1f}s" + (f" — {m.reason}" if m.reason else ""))
        for key, value in sorted(m.metrics.items()):
            print(f"  {key:<40} {human_value(value, key)}")
    return 0 if m.status == "ok" else 3
