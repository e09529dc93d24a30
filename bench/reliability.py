"""What the reliability pass costs, measured side by side in one run (``python bench/reliability.py``).

* the probe's launcher (bisector/process/launcher.py): a trivial child run bare and supervised, interleaved;
* the redaction pass: a measurement's details (the size of a ga_memory result) redacted, against
  serialising them (what storing them costs anyway);
* opening a store: after a clean close, and after an unclean one (the integrity check), on a store of
  ``--runs`` runs;
* the store's size for ``--repeats`` repeats of one result of that size, its bulky fields kept once (as
  stored) against kept whole in every measurement (as before).

Each prints medians and their ratio; nothing here is asserted (tests never time anything).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bisector.process.procs import run_bounded  # noqa: E402
from bisector.redact import redact_data, redact_text  # noqa: E402
from bisector.store.storage import RunKind, RunRow, Store, now  # noqa: E402


def _median_s(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def launcher(rounds: int) -> None:
    argv = [sys.executable, "-I", "-S", "-c", "pass"]
    bare, supervised = [], []
    for _ in range(rounds):   # interleaved, so load on the machine hits both alike
        bare.append(_median_s(lambda: run_bounded(argv, None), 1))
        supervised.append(_median_s(lambda: run_bounded(argv, None, supervise=True), 1))
    b, s = statistics.median(bare), statistics.median(supervised)
    print(f"launcher: a trivial child {b * 1000:.1f} ms bare, {s * 1000:.1f} ms supervised: "
          f"+{(s - b) * 1000:.1f} ms a probe ({s / b:.2f}x of a child that does nothing)")


def details(size_kib: int) -> dict:
    rng = random.Random(1)
    cells = []
    while len(json.dumps(cells)) < size_kib * 1024:
        cells.append({"cell": f"bf16.ga2.h{rng.choice([64, 128, 192, 256])}", "peak_bytes": rng.random() * 1e7,
                      "sites": [{"site": f"/home/user/.cache/bisector/envs/x/lib/python3.11/site-packages/"
                                         f"transformers/models/gpt_neox/modeling_gpt_neox.py:{rng.randint(1, 900)}",
                                 "bytes": rng.randint(1, 1 << 24)} for _ in range(6)]})
    return {"stderr_tail": "warning: something\n" * 50, "result": {"cells": cells, "meter": "cpu-dispatch"}}


def redaction(rounds: int, size_kib: int) -> None:
    data = details(size_kib)
    text = json.dumps(data)
    dump = _median_s(lambda: json.dumps(data), rounds)
    red = _median_s(lambda: redact_text(text), rounds)
    walk = _median_s(lambda: json.dumps(redact_data(data)), rounds)
    print(f"redaction: {len(text) / 1024:.0f} KiB of details: json.dumps {dump * 1000:.2f} ms, redact_text of the "
          f"JSON text {red * 1000:.2f} ms ({red / dump:.2f}x), redact_data then json.dumps (what the store does) "
          f"{walk * 1000:.2f} ms ({walk / dump:.2f}x the serialising a store write does anyway)")


def store_open(rounds: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.db"
        store = Store(path)
        for i in range(runs):
            store.put_run(RunRow(id=f"r{i}", created=now(), updated=now(), kind=RunKind.BISECT, command=["b"],
                                 config={"pad": "x" * 4000}, status="found"))
        store.close()
        mb = path.stat().st_size / 1e6
        clean = _median_s(lambda: Store(path).close(), rounds)

        def unclean():
            Path(str(path) + ".init.lock").write_text("open")   # as a killed run leaves it
            Store(path).close()
        checked = _median_s(unclean, rounds)
    print(f"store open: {mb:.1f} MB store, clean {clean * 1000:.1f} ms, after an unclean end (integrity_check) "
          f"{checked * 1000:.1f} ms ({checked / clean:.2f}x)")


def store_size(repeats: int, size_kib: int) -> None:
    from bisector.store import blobs
    from bisector.core.measurement import Measurement
    data, sizes = details(size_kib), {}
    for label, threshold in (("kept once", blobs.BLOB_MIN_BYTES), ("whole", 1 << 60)):
        blobs.BLOB_MIN_BYTES = threshold
        with tempfile.TemporaryDirectory() as tmp:
            store = Store(Path(tmp) / "s.db")
            for r in range(repeats):
                store.put_measurement(Measurement(key=f"k{r}", package="p", candidate="1.0", env_fingerprint="e",
                                                  probe_fingerprint="f", repeat=r, status="ok", metrics={"m": 1.0},
                                                  seconds=1.0, details=data))
            store.close()
            sizes[label] = (Path(tmp) / "s.db").stat().st_size / 1e6
    print(f"store size: {repeats} repeats of a {size_kib} KiB result: {sizes['kept once']:.2f} MB with its cells kept "
          f"once, {sizes['whole']:.2f} MB kept whole ({sizes['whole'] / sizes['kept once']:.1f}x)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--details-kib", type=int, default=128, help="size of the details redacted (a ga_memory result)")
    p.add_argument("--runs", type=int, default=5000, help="runs in the store opened")
    p.add_argument("--repeats", type=int, default=20, help="repeats of one result stored")
    args = p.parse_args()
    launcher(args.rounds)
    redaction(args.rounds, args.details_kib)
    store_open(max(3, args.rounds // 3), args.runs)
    store_size(args.repeats, args.details_kib)


if __name__ == "__main__":
    main()
