"""The decision rule in words, as reports state it: the whole rule (repeats, noise, the failure classes, stats
mode's protocol) and a matrix's rule against its baseline cell. (A calibrated rule's one line, ``metric > 1.2 MiB``,
is ``Calibrated.describe`` in bisector.core.criterion.)"""
from __future__ import annotations

from bisector.core.criterion import Compare, Criterion, Direction, _comparison
from bisector.core.stats import CONFIRM_ALPHA, CONFIRM_MISS
from bisector.core.units import human_value


def describe_against_baseline(c: Criterion) -> str:
    """The rule of a matrix run, where the baseline cell plays the good endpoint."""
    if c.threshold is not None:
        return _comparison(c, c.threshold)
    if c.max_increase is not None:
        way = "up" if c.direction is Direction.INCREASE else "down"
        return f"{c.metric} moves {way} more than {c.max_increase} from the baseline cell"
    if c.compare is Compare.EXACT:
        return f"{c.metric} differs from the baseline cell's at all (bit-equality)"
    if c.max_change is not None:
        return f"{c.metric} moves more than {c.max_change} from the baseline cell, either way"
    return f"{c.metric} reported (no threshold)" if c.metric else "probe failures only (no metric criterion)"


def _stats_rule_text(c: Criterion) -> str:
    return (f"samples interleaved with the good endpoint's (good, candidate, good, ...), a first round of {c.repeats} "
            f"pairs, then a pair at a time up to {c.max_repeats}; DIFFERENT when the smaller of the one-sided Mann-Whitney U and "
            f"Kolmogorov-Smirnov p-values against the good endpoint's samples is <= {c.alpha:g}: BAD when the "
            f"Hodges-Lehmann shift is at least {c.min_effect}, GOOD below half of it (between: another pair); SAME (GOOD) when that p-value is above "
            "the threshold a regression as large as the endpoints' (a conservative estimate) would stay below 99% of the time, or when the "
            f"bad endpoint's samples are worse than the candidate's at p <= {c.alpha:g} (never below p = 0.01 against "
            f"the good endpoint's), either only with a shift below {c.min_effect}; UNKNOWN asks for another "
            "pair, and is a SKIP (with its numbers) after the last; the culprit is confirmed on fresh interleaved samples "
            f"of the boundary pair (the first bad worse than the last good at p <= {CONFIRM_ALPHA:g} at any look, SAME when a "
            f"step as large as the endpoints' would show below it {1 - CONFIRM_MISS:.1%} of the time)")


def describe_rule(c: Criterion, exit_code_mode: bool = False) -> str:
    """The decision rule in words, as the report states it."""
    if exit_code_mode:
        return "probe exit code: 0 GOOD, 125 SKIP, 1-127 BAD; signals and codes above 127 SKIP"
    fails = (f"out of memory {'BAD' if c.oom_is_bad else 'SKIP'}, crash or bad output "
             f"{'BAD' if c.crash_is_bad else 'SKIP'}, timeout {'BAD' if c.timeout_is_bad else 'SKIP'}, "
             "broken environment SKIP")
    if c.compare is Compare.STATS:
        return f"{_stats_rule_text(c)}; failures: {fails}"
    if not c.metric:
        return f"a probe that succeeds is GOOD; failures: {fails}"
    if c.two_sided:
        rule = ("the good end measured twice first (a program that does not repeat within the tolerance is refused: "
                "noise is not a change), then one measurement per candidate, BAD when it moves beyond the tolerance "
                "from the good end's value, either way, else GOOD")
    elif c.repeats == 1 and c.noise == 0:
        rule = "one measurement per candidate, BAD when it is beyond the threshold, else GOOD"
    else:
        noise = f" or their median is within ±{human_value(c.noise, c.metric)} of it" if c.noise else ""
        rule = (f"{c.repeats} measurement{'s' if c.repeats > 1 else ''} per candidate, up to {c.max_repeats} "
                f"while they straddle the threshold{noise}; BAD when all are beyond the threshold, GOOD "
                "when none is, otherwise SKIP (unknown)")
    return f"{rule}; failures: {fails}"
