"""Where fake mode stopped a program (``--fake``), read from the meter's records (standard library only).

Fake mode refuses a read of a tensor's value (``loss.item()``, a data-dependent branch) by raising at the line
that read; the meter records the refusal in the next record it writes (``fake_refused``: a step finished after
it, or the ``end`` record). The optimizer steps a process finished before its first refusal ran as they would
have for real (nothing was made up before them): they are measured. What came after is not (a program that
caught the refusal went on without the value it asked for).
"""


def fake_cut(procs):
    """The first refusal's message (None: none), each process's steps cut at its first refusal and the whole-run
    peak of a process that was refused left to those steps."""
    refused = None
    for proc in procs.values():
        steps, end = proc["steps"], proc["end"] or {}
        cut = next((i for i, step in enumerate(steps) if step.get("fake_refused")), None)
        said = steps[cut]["fake_refused"] if cut is not None else end.get("fake_refused")
        if said:
            refused = refused or str(said)[:500]
            del steps[len(steps) if cut is None else cut:]
            if proc["end"] is not None:
                proc["end"] = {k: v for k, v in end.items() if k != "run_peak_bytes"}
    return refused


def stopped(result, refused):
    """The result of a program fake mode stopped: its measured steps' metrics and where it stopped
    (``fake_stopped``), when any step was measured; else no number, the refusal as the error (``fake_refused``)."""
    if "step_peak_bytes" in result.get("metrics", {}):
        steps = int(result["metrics"].get("optimizer_steps", 0))
        return {**result, "fake_stopped": f"after {steps} optimizer step{'s' if steps != 1 else ''} (those it "
                                          f"finished are measured): {refused}"}
    keep = {k: result[k] for k in ("schema_version", "probe", "command", "measure_skip", "units", "processes")
            if k in result}
    return {**keep, "metrics": {}, "meter": "cpu-dispatch (fake)", "error": refused, "fake_refused": refused}
