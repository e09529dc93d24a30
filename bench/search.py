"""Benchmark of the search core: probes and rounds against the ceil(log_{k+1} N) + 2 bound.

Run as ``python bench/search.py`` (no installation needed). Prints one table, then whether
every row without skips is within the bound, and how far rows with skips go over. A probe that
comes back SKIP teaches the search nothing, so with skips the bound that must hold is the bound
plus the rounds that hit a skip (column ``b+s``). Exits 1 when a row without skips exceeds the
bound, a run with skips exceeds bound + its skipped rounds, or any run misses the boundary.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bisector.core.search import Outcome, Search  # noqa: E402
from bisector.core.verdict import Verdict  # noqa: E402

SIZES = (10, 100, 1000, 10000)
JOBS = (1, 2, 4)
SKIP_RATE = 0.10
BOUNDARIES = 40  # random boundaries averaged per row
SEED = 20240601


def ceil_log(base: int, n: int) -> int:
    """Smallest t with base**t >= n, in exact integer arithmetic."""
    t, power = 0, 1
    while power < n:
        power *= base
        t += 1
    return t


def run_once(n: int, jobs: int, boundary: int, skips: set[int]) -> tuple[int, int, int, bool]:
    """One search over a monotone list; returns (probes, rounds, rounds that hit a skip, found the boundary)."""
    search = Search(n, jobs)
    probes = rounds = skipped_rounds = 0
    while not search.done:
        batch = search.next_batch()
        rounds += 1
        probes += len(batch)
        skipped_rounds += any(i in skips for i in batch)
        for i in batch:
            verdict = Verdict.SKIP if i in skips else (Verdict.GOOD if i < boundary else Verdict.BAD)
            search.record(i, verdict)
    result = search.result()
    found = result.outcome is Outcome.FOUND and result.first_bad == boundary
    return probes, rounds, skipped_rounds, found or boundary in result.ambiguous


def row(n: int, jobs: int, with_skips: bool, rng: random.Random) -> dict:
    """Average a row over random boundaries (and random interior skips if asked)."""
    bound = ceil_log(jobs + 1, n) + 2
    probes, rounds, excess, correct = [], [], [], 0
    for _ in range(BOUNDARIES):
        boundary = rng.randint(1, n - 1)
        skips = {i for i in range(1, n - 1) if rng.random() < SKIP_RATE} if with_skips else set()
        p, r, skipped_rounds, ok = run_once(n, jobs, boundary, skips)
        probes.append(p)
        rounds.append(r)
        excess.append(r - bound - skipped_rounds)
        correct += ok
    return {"n": n, "jobs": jobs, "skips": with_skips, "probes": sum(probes) / len(probes),
            "rounds": sum(rounds) / len(rounds), "max_rounds": max(rounds), "bound": bound,
            "within_skip_bound": max(excess) <= 0, "correct": correct == BOUNDARIES}


def main() -> int:
    rng = random.Random(SEED)
    rows = [row(n, jobs, skips, rng) for n in SIZES for jobs in JOBS for skips in (False, True)]
    header = (f"{'N':>6} {'jobs':>4} {'skips':>5} {'probes':>7} {'rounds':>7} {'max':>4} "
              f"{'bound':>5} {'ratio':>6} {'within':>6} {'b+s':>4} {'correct':>7}")
    print(header)
    print("-" * len(header))
    for r in rows:
        within = r["max_rounds"] <= r["bound"]
        r["within"] = within
        skips = f"{SKIP_RATE:.0%}" if r["skips"] else "0%"
        print(f"{r['n']:>6} {r['jobs']:>4} {skips:>5} {r['probes']:>7.2f} {r['rounds']:>7.2f} "
              f"{r['max_rounds']:>4} {r['bound']:>5} {r['rounds'] / r['bound']:>6.2f} "
              f"{'yes' if within else 'NO':>6} {'yes' if r['within_skip_bound'] else 'NO':>4} "
              f"{'yes' if r['correct'] else 'NO':>7}")
    print(f"(probes/rounds averaged over {BOUNDARIES} random boundaries per row; "
          f"ratio = mean rounds / bound; bound = ceil(log_(jobs+1) N) + 2; b+s = every run within "
          f"bound + its rounds that hit a skip)")
    clean = [r for r in rows if not r["skips"]]
    over = [r for r in rows if r["skips"] and not r["within"]]
    print(f"rows without skips within bound: {'yes' if all(r['within'] for r in clean) else 'no'}")
    if over:
        worst = max(r["max_rounds"] - r["bound"] for r in over)
        print(f"rows with {SKIP_RATE:.0%} skips over bound: {len(over)} of {len(rows) - len(clean)} "
              f"(worst run +{worst} rounds; each skipped probe costs a probe, the bound assumes none)")
    print(f"every run within bound + rounds that hit a skip: "
          f"{'yes' if all(r['within_skip_bound'] for r in rows) else 'NO'}")
    failed = ([r for r in clean if not r["within"]] + [r for r in rows if not r["correct"]]
              + [r for r in rows if not r["within_skip_bound"]])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
