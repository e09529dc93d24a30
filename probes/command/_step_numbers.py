"""The numbers of a process's optimizer steps (``_numerics.py`` records them) as metrics (stdlib only).

Every step counts, warm-up included: ``--measure-skip`` leaves steps out of memory and time, but the first step is
where two versions' numbers are most comparable (the same weights, the same batch). A value that is not finite
(``"nan"``, ``"inf"`` in the record) is no number: the metric that would read it is absent with why, and
``nonfinite_steps`` counts the steps where the loss or the gradients were not finite.
"""
import math

NUMERIC = ("loss_first", "loss_last", "loss_mean", "grad_norm_first", "grad_norm_last", "update_norm_last",
           "nonfinite_steps")
NO_LOSS = ("no scalar was backpropagated (the meter sees Tensor.backward and torch.autograd.backward; "
           "torch.autograd.grad and a backward the program never runs are not seen)")


def _value(x):
    """(float, None) for a finite number; (None, its word) for nan / inf; (None, None) when absent."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return (float(x), None) if math.isfinite(x) else (None, repr(float(x)))
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return None, x
    return None, None


def _first_why(steps, field, fallback):
    return next((s[field] for s in steps if isinstance(s.get(field), str)), fallback)


def step_numbers(steps, why_none=None):
    """(metrics, absent) of one process's steps; ``why_none``: why it has no step (then every one is absent)."""
    out, absent = {}, {}
    if not steps:
        return out, {name: why_none or "no optimizer step seen" for name in NUMERIC}
    nonfinite = 0
    series = {}
    for name in ("loss", "grad_norm", "update_norm"):
        series[name] = [_value(s.get(name)) for s in steps]
    for i in range(len(steps)):
        if series["loss"][i][1] or series["grad_norm"][i][1]:
            nonfinite += 1
    seen_numbers = any(v != (None, None) for v in series["loss"] + series["grad_norm"])
    if seen_numbers or any("grad_norm_absent" in s for s in steps):
        out["nonfinite_steps"] = nonfinite
    else:
        absent["nonfinite_steps"] = NO_LOSS
    unread = _first_why(steps, "loss_unread", None)
    reasons = {"loss": f"the loss was not read ({unread}: the meter reads plain CPU and CUDA tensors)" if unread else
               NO_LOSS if not any(s.get("loss_nonscalar") for s in steps) else
               "only non-scalars were backpropagated (backward with a gradient argument): no loss to read",
               "grad_norm": _first_why(steps, "grad_norm_absent", "no gradient was read"),
               "update_norm": _first_why(steps, "update_norm_absent", "not read")}
    error = _first_why(steps, "numerics_error", None)
    for name, picks in (("loss", ("first", "last", "mean")), ("grad_norm", ("first", "last")),
                        ("update_norm", ("last",))):
        values = series[name]
        for pick in picks:
            metric = f"{name}_{pick}"
            chosen = values[0] if pick == "first" else values[-1] if pick == "last" else None
            if pick == "mean":
                words = [w for _, w in values if w]
                numbers = [v for v, _ in values if v is not None]
                if words:
                    absent[metric] = f"not finite ({words[0]}) at {len(words)} step(s): nonfinite_steps counts them"
                elif len(numbers) == len(values):
                    out[metric] = math.fsum(numbers) / len(numbers)
                else:
                    absent[metric] = f"read at {len(numbers)} of {len(values)} steps: {reasons[name]}"
                continue
            step = 0 if pick == "first" else len(steps) - 1
            if chosen[0] is not None:
                out[metric] = chosen[0]
            elif chosen[1]:
                absent[metric] = f"not finite ({chosen[1]}) at step {step}: nonfinite_steps counts such steps"
            else:
                absent[metric] = f"not read at step {step}: " + (f"the meter failed: {error}" if error else reasons[name])
    return out, absent
