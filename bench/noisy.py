"""Stats mode against threshold mode on the same seeded noisy histories.

Run as ``python bench/noisy.py [--histories 200] [--candidates 8]``. Each history is a list of
candidates whose timed metric is ``base * level * (1 + noise)``: noise uniform in +-25%, a +20% step
planted at a seeded index in three histories of four (none in the fourth), and in the "bursty" rows
the machine's load slows every run by 15% for stretches of 40 probes (about one probe in 60 starts
one), the drift of a shared runner. Every mode judges the very same values: a history's value for
(candidate, repeat) does not depend on the mode, only the load bursts follow each mode's own clock.

The candidates go through bisector's own search phases (``bisection.phase.Phase`` and
``bisection.stats_phase.StatsPhase``, confirmation included) behind the measuring seam, with a
measurer that draws from the history instead of running a probe. Prints, per mode: the rate of
correct culprits (the planted step named and confirmed), of false culprits (any other candidate
named, over every history), of answers without a culprit, and the probes used; then the targets:
stats mode at least 95% correct with no false culprit, at most 3x the probes of the threshold mode
with a noise band. Exits 1 when a target is missed. Then stats mode again over ``--more-seeds`` other seeds (printed,
not a target): how often a rare false culprit still gets through. Last, the confirmation alone
(``--confirmations`` trials of ``PairedJudge.confirm_step`` on a boundary pair after the endpoints' round): how
often it passes a pair with no step between them and fails one with the +20% step, at its per-look level
and at the 1% a look it had before (printed, not a target).
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bisector.decide.paired import PairedJudge  # noqa: E402
from bisector.bisection.phase import Phase  # noqa: E402
from bisector.bisection.stats_phase import StatsPhase  # noqa: E402
from bisector.core.candidate import Candidate, CandidateKind  # noqa: E402
from bisector.core.criterion import Criterion  # noqa: E402
from bisector.core.measurement import Measurement, Status  # noqa: E402
from bisector.core.search import Outcome  # noqa: E402
from bisector.core.stats import CONFIRM_ALPHA, CONFIRM_MISS  # noqa: E402
from bisector.core.verdict import Verdict  # noqa: E402

METRIC, BASE, NOISE, STEP = "step_seconds", 0.03, 0.25, 0.20
BURST_START, BURST_PROBES, BURST_SLOWDOWN = 1 / 60, 40, 0.15
MODES = {
    "stats (defaults: --compare stats)": dict(compare="stats"),
    "threshold, noise band: --max-increase 10% --repeats 5 --max-repeats 9 --noise 5%":
        dict(max_increase="10%", repeats=5, max_repeats=9, noise=0.05 * BASE),
    "threshold, one run: --max-increase 10%": dict(max_increase="10%"),
}
BAND_MODE = list(MODES)[1]


@dataclass
class History:
    """One seeded noisy history: candidate levels and the seed of its noise."""

    seed: int
    levels: list[float]
    planted: Optional[int]

    def value(self, index: int, repeat: int, load: float) -> float:
        noise = random.Random(f"{self.seed}:{index}:{repeat}").uniform(-NOISE, NOISE)
        return BASE * self.levels[index] * (1 + noise) * load


@dataclass
class HistoryMeasurer:
    """The measuring seam over a history: a (candidate, repeat) measured twice is reused, as the store
    would; load bursts follow this measurer's own probe clock when ``bursty``."""

    history: History
    index: dict[str, int]
    bursty: bool
    exit_code_mode: bool = False
    probes_run: int = 0
    reused_keys: set = field(default_factory=set)
    _seen: dict = field(default_factory=dict)
    _burst_left: int = 0
    _rng: random.Random = field(default_factory=random.Random)

    def measure(self, c: Candidate, repeat: int = 0) -> Measurement:
        key = f"{c.ref}:{repeat}"
        if key in self._seen:
            self.reused_keys.add(key)
            return self._seen[key]
        self.probes_run += 1
        value = self.history.value(self.index[c.ref], repeat, self._load())
        m = Measurement(key=key, package="p", candidate=c.ref, env_fingerprint="sim", probe_fingerprint="sim",
                        repeat=repeat, status=Status.OK, metrics={METRIC: value}, seconds=value)
        self._seen[key] = m
        return m

    def _load(self) -> float:
        if not self.bursty:
            return 1.0
        if self._burst_left == 0 and self._rng.random() < BURST_START:
            self._burst_left = BURST_PROBES
        if self._burst_left:
            self._burst_left -= 1
            return 1 + BURST_SLOWDOWN
        return 1.0

    def prefetch(self, candidates: list[Candidate]) -> None:
        pass

    def speculate(self, pending: list[Candidate], likely: list[Candidate]) -> None:
        pass

    def warm(self, samples: list[tuple[Candidate, int]]) -> None:
        pass  # values come from the history: nothing to start


def histories(count: int, n: int, seed: int) -> list[History]:
    """Three in four with a +20% step at a seeded index, one in four without a step."""
    rng = random.Random(seed)
    out = []
    for h in range(count):
        planted = None if h % 4 == 3 else rng.randint(1, n - 1)
        levels = [1 + STEP if planted is not None and i >= planted else 1.0 for i in range(n)]
        out.append(History(seed=rng.randrange(1 << 30), levels=levels, planted=planted))
    return out


def seam(history: History, bursty: bool) -> tuple[list[Candidate], HistoryMeasurer]:
    """One candidate per level of ``history`` (oldest first) and the measurer over it."""
    cands = [Candidate(package="p", kind=CandidateKind.RELEASE, ref=f"1.{i}.0") for i in range(len(history.levels))]
    return cands, HistoryMeasurer(history, {c.ref: i for i, c in enumerate(cands)}, bursty,
                                  _rng=random.Random(history.seed + 1))


def run_one(history: History, mode: dict, bursty: bool) -> tuple[str, int]:
    """('correct' | 'false' | 'none', probes) for one history in one mode."""
    cands, measurer = seam(history, bursty)
    criterion = Criterion(metric=METRIC, **mode)
    kind = StatsPhase if mode.get("compare") == "stats" else Phase
    try:
        res = kind("releases", cands, measurer, criterion, lambda *a: None, prefetch=False,
                   confirm=criterion.should_confirm).run()
    except Exception:  # a relative rule refused to calibrate (the good endpoint gave nothing): no culprit
        return "none", measurer.probes_run
    s = res.search
    if s.outcome is not Outcome.FOUND or res.confirmed is False:
        return "none", measurer.probes_run
    return ("correct" if s.first_bad == history.planted else "false"), measurer.probes_run


def table(hs: list[History], bursty: bool) -> dict[str, dict]:
    rows = {}
    planted = sum(h.planted is not None for h in hs)
    for name, mode in MODES.items():
        outcomes = [run_one(h, mode, bursty) for h in hs]
        rows[name] = {"correct": sum(o == "correct" for o, _ in outcomes) / planted,
                      "false": sum(o == "false" for o, _ in outcomes) / len(hs),
                      "none": sum(o == "none" for o, _ in outcomes) / len(hs),
                      "probes": statistics.mean(p for _, p in outcomes),
                      "probes_step": statistics.mean(p for (_, p), h in zip(outcomes, hs) if h.planted is not None),
                      "probes_flat": statistics.mean(p for (_, p), h in zip(outcomes, hs) if h.planted is None)}
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=200)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--seed", type=int, default=20251201)
    parser.add_argument("--more-seeds", type=int, default=4, help="stats mode again over this many other seeds' "
                        "histories (printed, not a target: how often a rare false culprit gets through)")
    parser.add_argument("--confirmations", type=int, default=1000, help="trials of the confirmation alone, per "
                        "case and level (0: skip)")
    args = parser.parse_args()
    hs = histories(args.histories, args.candidates, args.seed)
    print(f"{len(hs)} histories of {args.candidates} candidates ({sum(h.planted is not None for h in hs)} with a "
          f"+{STEP:.0%} step), noise +-{NOISE:.0%}")
    ok = True
    for bursty in (False, True):
        rows = table(hs, bursty)
        print(f"\n{'bursty load' if bursty else 'quiet machine'}:")
        print(f"  {'mode':84s} {'correct':>8s} {'false':>6s} {'no culprit':>10s} {'probes':>7s} {'(step':>6s} {'flat)':>6s}")
        for name, r in rows.items():
            print(f"  {name:84s} {r['correct']:8.1%} {r['false']:6.1%} {r['none']:10.1%} {r['probes']:7.1f} "
                  f"{r['probes_step']:6.1f} {r['probes_flat']:6.1f}")
        stats, band = rows[list(MODES)[0]], rows[BAND_MODE]
        ratio = stats["probes"] / band["probes"]
        hit = stats["correct"] >= 0.95 and stats["false"] == 0 and ratio <= 3
        ok = ok and hit
        print(f"  stats: {stats['correct']:.1%} correct, {stats['false']:.1%} false culprits, {ratio:.2f}x the probes "
              f"of the threshold mode with a noise band (targets: >= 95%, 0, <= 3x): {'met' if hit else 'MISSED'}")
    if args.more_seeds:
        robustness(args)
    if args.confirmations:
        confirmation_rates(args.confirmations)
    return 0 if ok else 1


def robustness(args: argparse.Namespace) -> None:
    """Stats mode over ``--more-seeds`` further seeds' histories, quiet and bursty together."""
    mode, runs, correct, false, planted = MODES[list(MODES)[0]], 0, 0, 0, 0
    for seed in range(1, args.more_seeds + 1):
        hs = histories(args.histories, args.candidates, seed)
        for bursty in (False, True):
            outcomes = [run_one(h, mode, bursty)[0] for h in hs]
            runs, planted = runs + len(hs), planted + sum(h.planted is not None for h in hs)
            correct, false = correct + outcomes.count("correct"), false + outcomes.count("false")
    print(f"\nstats mode over {args.more_seeds} more seeds ({runs} runs, quiet and bursty): {correct / planted:.1%} "
          f"correct, {false} false culprit{'s' if false != 1 else ''} ({false / runs:.2%})")


def confirm_once(seed: int, step_between: bool, level: tuple[float, float]) -> tuple[bool, int]:
    """One confirmation of a boundary pair (candidates 1 and 2 of four; the bad endpoint +20%) after the
    endpoints' round that sets the size of step SAME rules out, at ``level`` (alpha, miss) a look:
    (passed, probes of the confirmation)."""
    levels = [1.0, 1.0, 1 + STEP if step_between else 1.0, 1 + STEP]
    cands, measurer = seam(History(seed=seed, levels=levels, planted=None), bursty=False)
    judge = PairedJudge(measurer, Criterion(metric=METRIC, compare="stats"), cands[0], cands[3], 4)
    judge.endpoints()
    before = measurer.probes_run
    j = judge.confirm_step(cands[1], 100, cands[2], 100, *level)
    return j.verdict is Verdict.BAD, measurer.probes_run - before


def confirmation_rates(trials: int) -> None:
    """The confirmation's two errors at its per-look level and at 1% a look."""
    print(f"\nthe confirmation alone ({trials} boundary pairs per case, +-{NOISE:.0%} noise, a look after every pair):")
    for name, level in ((f"{CONFIRM_ALPHA:g} a look (now)", (CONFIRM_ALPHA, CONFIRM_MISS)),
                        ("0.01 a look (before)", (0.01, 0.01))):
        null = [confirm_once(seed, False, level) for seed in range(trials)]
        step = [confirm_once(seed, True, level) for seed in range(trials)]
        false_pass = sum(p for p, _ in null) / trials
        miss = sum(not p for p, _ in step) / trials
        probes = statistics.mean(n for _, n in null), statistics.mean(n for _, n in step)
        print(f"  {name:22s} passes a pair without a step {false_pass:5.1%} ({probes[0]:.1f} probes), fails the "
              f"+{STEP:.0%} step {miss:5.1%} ({probes[1]:.1f} probes)")


if __name__ == "__main__":
    raise SystemExit(main())
