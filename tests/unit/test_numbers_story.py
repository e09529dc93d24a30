"""The story of a numbers culprit (bisector/explain/numbers_story.py, through the command meter's explainer): each
step's loss and norms at last good and first bad side by side, where they part, and whether the gradients (for a
loss) or the loss (for a gradient norm) changed too."""
from __future__ import annotations

from bisector.explain.registry import compact_details, explain, explainer_for


def _result(losses, grads, updates=None):
    steps = [{"i": i, "peak_bytes": 1000, "loss": loss, "loss_count": 4, "grad_norm": grad}
             for i, (loss, grad) in enumerate(zip(losses, grads))]
    for step, update in zip(steps, updates or []):
        step["update_norm"] = update
    return {"schema_version": "command/1", "steps": steps, "measure_skip": 1}


def _story(metric, good, bad):
    return explain({metric: 1.0}, {metric: 2.0}, metric, compact_details(good), compact_details(bad),
                   schema_version="command/1")


def test_a_loss_and_its_gradients_that_part_at_the_first_step_say_it_is_a_training_change():
    good = _result([6.7167, 6.70], [6.0498, 6.10], [0.06, 0.061])
    bad = _result([6.50101, 6.49], [9.69737, 9.7], [0.097, 0.097])
    lines = _story("loss_first", good, bad)
    assert lines[0] == "Each step's numbers, last good → first bad:"
    assert lines[1] == ("step 0: loss 6.7167 → 6.50101 (-3.21%), grad_norm 6.0498 → 9.69737 (+60.29%), update_norm "
                        "0.06 → 0.097 (+61.67%).")
    assert lines[3] == "They part at step 0 (the first optimizer step): loss -3.21%, grad_norm +60.29%, update_norm +61.67%."
    assert lines[4] == ("The gradients changed too (grad_norm 6.0498 → 9.69737 at step 0, +60.29%): a training "
                        "change, not only the loss it reports.")


def test_a_loss_that_changed_while_every_gradient_stayed_is_only_the_reported_loss():
    good, bad = _result([2.0, 1.9, 1.8], [1.5, 1.4, 1.3]), _result([2.0, 1.9 * 4, 1.8 * 4], [1.5, 1.4, 1.3])
    lines = _story("loss_last", good, bad)
    assert "step 0: loss 2 (the same), grad_norm 1.5 (the same)." in lines
    assert "They part at step 1: loss +300.00%." in lines
    assert ("The gradients did not change (grad_norm the same at each of the 3 steps kept): only the loss the program "
            "reports changed, not its training.") in lines


def test_a_gradient_norm_says_whether_the_loss_moved_and_a_tiny_change_is_shown_as_it_is():
    good, bad = _result([3.0, 3.0], [1.0, 1.0]), _result([3.0, 3.0], [1.001, 1.001])
    lines = _story("grad_norm_first", good, bad)
    assert "They part at step 0 (the first optimizer step): grad_norm +0.10%." in lines
    assert any(line.startswith("The loss did not change (the same at each of the 2 steps kept)") for line in lines)
    same = _story("grad_norm_first", good, _result([3.0, 3.0], [1.0 + 1e-9, 1.0]))
    assert "The 2 steps kept are the same on both sides (to 1e-06): the change is in a later step." in same


def test_not_finite_values_and_what_was_not_read_are_said_never_a_number():
    good, bad = _result([1.0, 1.0], [1.0, 1.0]), _result([1.0, float("nan")], [1.0, float("nan")])
    bad["steps"][1]["loss"] = bad["steps"][1]["grad_norm"] = "nan"   # as the meter writes it
    lines = _story("nonfinite_steps", good, bad)
    assert "step 1: loss 1 → nan (not finite on one side), grad_norm 1 → nan (not finite on one side)." in lines
    no_grads = {"schema_version": "command/1", "steps": [{"i": 0, "loss": 1.0}]}
    said = _story("loss_first", no_grads, {"schema_version": "command/1", "steps": [{"i": 0, "loss": 2.0}]})
    assert said[3] == "Whether the gradients changed too is not known: grad_norm was not read at both sides' steps."


def test_other_metrics_keep_their_story_and_one_version_lists_the_numbers():
    good, bad = _result([1.0], [1.0]), _result([1.0], [1.0])
    assert not any("Each step's numbers" in line for line in _story("step_peak_bytes", good, bad))
    explainer = explainer_for("command/1")
    lines = explainer.one_version({"loss_first": 1.0}, compact_details(_result([6.5, 6.4], [9.7, 9.6])), "loss_first")
    assert lines[0] == ("Numbers per optimizer step (warm-up included): step 0: loss 6.5, grad_norm 9.7; step 1: "
                        "loss 6.4, grad_norm 9.6.")
