"""The numbers of the program's steps as metrics (probes/command/_step_numbers.py through _aggregate.summarize):
every step counts, warm-up included; what is not finite or was not read is absent with why, never a number; with
several ranks the metric is the lowest rank's and each rank keeps its own."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "probes" / "command"))
from _aggregate import METRICS, summarize  # noqa: E402
from _step_numbers import NUMERIC, step_numbers  # noqa: E402


def _proc(rank, steps):
    return {"load": {"rank": rank}, "torch": {"meter": "cpu-dispatch", "device": "cpu"}, "end": {"wall": 1.0},
            "errors": [], "raised": [], "lost": [],
            "steps": [{"i": i, "peak_bytes": 100, "run_peak_bytes": 100, "seconds": 0.1, **s} for i, s in
                      enumerate(steps)]}


def test_every_step_counts_and_the_table_names_each_metric_without_a_unit():
    steps = [{"loss": 4.0, "loss_count": 4, "grad_norm": 2.0, "update_norm": 0.2},
             {"loss": 3.0, "loss_count": 4, "grad_norm": 1.0, "update_norm": 0.1}]
    metrics, _ = summarize({1: _proc("0", steps)}, skip=1, wall=2.0)   # --measure-skip 1 leaves no number out
    assert {k: metrics[k] for k in NUMERIC} == {"loss_first": 4.0, "loss_last": 3.0, "loss_mean": 3.5,
                                                 "grad_norm_first": 2.0, "grad_norm_last": 1.0,
                                                 "update_norm_last": 0.1, "nonfinite_steps": 0}
    assert all(METRICS[k][0] == "" for k in NUMERIC[:-1]) and METRICS["nonfinite_steps"][0] == "count"


def test_what_is_not_finite_or_not_read_is_absent_with_why():
    steps = [{"loss": 4.0, "grad_norm": 2.0, "update_norm_absent": "the stepped parameters hold 622 MiB, beyond"},
             {"loss": "nan", "grad_norm": "inf", "update_norm_absent": "the stepped parameters hold 622 MiB, beyond"}]
    out, absent = step_numbers([{"i": i, **s} for i, s in enumerate(steps)])
    assert out == {"loss_first": 4.0, "grad_norm_first": 2.0, "nonfinite_steps": 1}
    assert absent["loss_last"] == "not finite (nan) at step 1: nonfinite_steps counts such steps"
    assert absent["grad_norm_last"] == "not finite (inf) at step 1: nonfinite_steps counts such steps"
    assert absent["loss_mean"] == "not finite (nan) at 1 step(s): nonfinite_steps counts them"
    assert absent["update_norm_last"].startswith("not read at step 1: the stepped parameters hold 622 MiB")
    none, why = step_numbers([{"i": 0, "grad_norm": 1.0}])
    assert "loss_first" not in none and why["loss_first"].startswith("not read at step 0: no scalar was backpropagated")
    assert step_numbers([], "the command stepped no optimizer")[1]["loss_first"] == "the command stepped no optimizer"
    fake = step_numbers([{"i": 0, "grad_norm": 1.0, "loss_unread": "a FakeTensor on cpu"}])[1]
    assert fake["loss_first"] == ("not read at step 0: the loss was not read (a FakeTensor on cpu: the meter reads "
                                  "plain CPU and CUDA tensors)")
    failed = step_numbers([{"i": 0, "numerics_error": "RuntimeError: boom"}])[1]
    assert failed["grad_norm_first"] == "not read at step 0: the meter failed: RuntimeError: boom"


def test_with_several_ranks_a_loss_is_the_lowest_ranks_and_a_count_of_nonfinite_steps_the_most():
    rank0 = [{"loss": 1.0, "grad_norm": 5.0}, {"loss": 1.5, "grad_norm": 5.0}]
    rank1 = [{"loss": 2.0, "grad_norm": 5.0}, {"loss": "nan", "grad_norm": "nan"}]
    metrics, facts = summarize({11: _proc("1", rank1), 10: _proc("0", rank0)}, skip=1, wall=2.0)
    assert metrics["loss_first"] == 1.0 and metrics["loss_first.rank1"] == 2.0
    assert metrics["nonfinite_steps"] == 1 and metrics["nonfinite_steps.rank0"] == 0
    assert "loss_last" not in metrics and "not finite" in facts["absent"]["loss_last"]   # a rank lacks it
    assert metrics["loss_last.rank0"] == 1.5
