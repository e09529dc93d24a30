"""What the allocator model costs: replay time per trace, and the CPU meter's overhead with the trace.

    python bench/allocator.py [--rounds 5] [--probe]

1. Replay: synthetic traces of 1k..30k events (the sizes of a training step: small tensors, 1-30 MiB
   activations, 10-300 MiB weights, each freed at random later) under torch's defaults,
   expandable_segments and max_split_size_mb:64; median milliseconds over ``--rounds`` and events per
   second. ``--probe`` also replays the traces of a real ga_memory run (default widths, one cell each).
2. Meter: one training step of a small transformer stack (torch only) under the CPU meter without
   and with the allocator model (trace recorded, then replayed), interleaved A B A B so a drift of
   the machine hits both; the ratio of medians is the model's overhead on a cell.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "probes", "ga_memory"), os.path.join(ROOT, "probes")]

from _allocator_model.conf import parse_alloc_conf  # noqa: E402
from _allocator_model.replay import replay  # noqa: E402
from _allocator_model.trace import Trace  # noqa: E402

MIB = 1024 * 1024
CONFS = ("", "expandable_segments:True", "max_split_size_mb:64")


def synthetic(n_events: int, seed: int = 0) -> Trace:
    rng = random.Random(seed)
    events, live, allocs = [], [], 0
    while len(events) < n_events:
        if live and (rng.random() < 0.5 or len(live) > 400):
            events.append(-(live.pop(rng.randrange(len(live))) + 1))
            continue
        kind = rng.random()
        size = (rng.randint(4, 64 * 1024) if kind < 0.6 else rng.randint(MIB, 30 * MIB) if kind < 0.95
                else rng.randint(10 * MIB, 300 * MIB))
        events.append(size)
        live.append(allocs)
        allocs += 1
    return Trace(events, window=(n_events // 2, n_events))


def timed_replay(trace, settings, rounds):
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        out = replay(trace, settings)
        times.append(time.perf_counter() - start)
    if "error" in out:
        sys.exit(f"replay failed: {out['error']}")
    return statistics.median(times)


def replay_table(rounds):
    print("replay (median of %d)" % rounds)
    print(f"{'events':>8}  " + "  ".join(f"{c or 'defaults':>26}" for c in CONFS))
    for n in (1000, 3000, 10000, 30000):
        trace = synthetic(n)
        cols = []
        for conf in CONFS:
            seconds = timed_replay(trace, parse_alloc_conf(conf), rounds)
            cols.append(f"{seconds * 1000:9.1f} ms {n / seconds / 1000:8.0f}k ev/s")
        print(f"{n:>8}  " + "  ".join(f"{c:>26}" for c in cols))


def probe_traces(rounds):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        subprocess.run([sys.executable, os.path.join(ROOT, "probes", "ga_memory", "__main__.py"), "--device", "cpu",
                        "--alloc-trace", "--result", out], check=True, stderr=subprocess.DEVNULL,
                       env={k: v for k, v in os.environ.items() if k != "BISECTOR_RESULT"})
        result = json.load(open(out))
    print("\nga_memory probe cells (defaults), replay of each cell's trace:")
    for cell in result["cells"]:
        trace = Trace.from_json(cell["alloc_trace"])
        seconds = timed_replay(trace, parse_alloc_conf(""), rounds)
        print(f"  {cell['precision']} GA={cell['ga']} h{cell['hidden']}: {len(trace.events):5d} events, "
              f"{seconds * 1000:6.1f} ms, est reserved {cell['est_reserved_peak_bytes'] / MIB:6.2f} MiB "
              f"for a live peak of {cell['peak_bytes'] / MIB:6.2f} MiB")


def meter_overhead(rounds):
    import torch

    from _allocator_model.conf import AllocSettings
    from _allocator_model.replay import AllocatorEstimate
    from _meters.cpu import StorageMeter

    torch.manual_seed(0)
    torch.set_num_threads(1)
    layer = lambda: torch.nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True)  # noqa: E731
    model = torch.nn.Sequential(*[layer() for _ in range(4)])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(2, 64, 128)

    def cell(allocator):
        meter = StorageMeter(allocations=AllocatorEstimate(allocator) if allocator is not None else None)
        meter.track(model.parameters())
        start = time.perf_counter()
        with meter:
            for step in range(2):
                if step:
                    meter.reset_peak()
                meter.mark("m0.forward")
                loss = model(x).square().mean()
                meter.mark("m0.backward")
                loss.backward()
                meter.mark("m0.step")
                opt.step()
                opt.zero_grad(set_to_none=True)
                del loss
            meter.mark(None)
        report = meter.report()
        meter.close()
        return time.perf_counter() - start, report

    cell(None)
    plain, modelled = [], []
    for _ in range(3 * rounds):
        plain.append(cell(None)[0])
        seconds, report = cell(AllocSettings())
        modelled.append(seconds)
    events = report["allocator_model"]["events"]
    a, b = statistics.median(plain), statistics.median(modelled)
    print(f"\nCPU meter, one warm-up + one measured step ({events} trace events), median of {3 * rounds}:")
    print(f"  without the model {a * 1000:7.1f} ms   with it {b * 1000:7.1f} ms   ratio {b / a:.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--probe", action="store_true", help="also replay a real ga_memory run's traces")
    args = ap.parse_args()
    replay_table(args.rounds)
    if args.probe:
        probe_traces(args.rounds)
    meter_overhead(args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
