"""Step allocator (planned 75 s on a GPU; widths 1024 and 2560): the caching allocator's model
(probes/ga_memory/_allocator_model/, issue 30) against CUDA's own allocator. Runs ``allocator_model.py`` on the bf16 cells (4 cells: two
widths, GA 1 and 2): each CUDA cell in a fresh interpreter records the allocator's history, which the
model replays against ``max_memory_reserved`` / ``max_memory_allocated``; the same cell's CPU trace
replayed by the model is compared with the CUDA reserved peak, and the bf16 GA cost in reserved bytes
with the measured one. Its checks become this step's (the dry run: the CUDA ones SKIP), with one of
its own: every CUDA cell ran on a CUDA device and read torch.cuda's counters. Its numbers and both
devices' traces stay in ``allocator/allocator_model*.json`` (not among the probe results)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gf  # noqa: E402
import verdicts  # noqa: E402
import verdicts_device  # noqa: E402

TIMEOUTS = {"allocator_model": 190}   # inner timeout, s (with the runner's reserve it fits the cap in run.sh)


def main() -> int:
    import allocator_model as am

    step = gf.Step("allocator")
    results = os.path.join(gf.out_dir(), "allocator")
    cmd = [sys.executable, os.path.join(HERE, "allocator_model.py"), "--out", results, "--precisions", "bf16",
           "--device", "cuda" if step.cuda else "cpu"]
    if step.cuda:
        cmd += ["--sizes", ",".join(map(str, am.GPU_SIZES)), "--layers", str(am.GPU_LAYERS), "--vocab",
                str(am.GPU_VOCAB)]
    else:   # the dry run: tiny
        cmd += ["--sizes", "64,96", "--vocab", "512", "--heads", "4"]
    code = step.run("allocator_model", cmd, dict(os.environ), TIMEOUTS["allocator_model"])
    data = gf.read_json(os.path.join(results, "allocator_model.json"))
    if data is None:
        step.check("allocator.ran", verdicts.incomplete(verdicts.said(code)) if verdicts.cut(code) else
                   verdicts.fail(f"allocator_model.py exited {code} without a result"))
        return step.done()
    step.fact("files", ["allocator/allocator_model.json", "allocator/allocator_model_traces.json"])
    step.check("allocator.ran", verdicts.ok(f"{verdicts.said(code)}, {data.get('cells_done')} of "
                                            f"{data.get('cells_planned')} cells"))
    if not data.get("complete", True):
        step.check("allocator.finished", verdicts.incomplete(
            f"allocator_model.py {verdicts.said(code)} after {data.get('cells_done')} of {data.get('cells_planned')} "
            "cells (each finished one kept in allocator/allocator_model.json)"))
    step.cuda_only("allocator.on_cuda", lambda: verdicts_device.allocator_on_cuda(data))
    for c in data.get("checks") or []:
        if c["status"] == "SKIP" and not step.cuda:
            step.cuda_only(f"allocator.{c['name']}", None)     # the dry run: SKIP, as every CUDA-only check says it
        else:
            step.check(f"allocator.{c['name']}", (c["status"], c["detail"]))
    costs = data.get("ga_cost_bf16") or {}
    step.table("allocator model: bf16 GA cost (B/param)", ["measured reserved (CUDA)", "model on the CUDA trace",
                                                           "model on the CPU trace", "CPU live bytes"],
               [[gf.num(costs.get(k), ".3f") for k in ("cuda_measured_reserved", "cuda_trace_model",
                                                       "cpu_trace_model", "cpu_live")]])
    return step.done()


if __name__ == "__main__":
    sys.exit(main())
