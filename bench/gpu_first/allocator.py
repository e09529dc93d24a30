"""Step allocator (planned 60 s on a GPU; widths 1024 and 2560): the caching allocator's model
(probes/ga_memory/_allocator.py, issue 30) against CUDA's own allocator. Runs ``allocator_model.py`` on the bf16 cells (4 cells: two
widths, GA 1 and 2): each CUDA cell in a fresh interpreter records the allocator's history, which the
model replays against ``max_memory_reserved`` / ``max_memory_allocated``; the same cell's CPU trace
replayed by the model is compared with the CUDA reserved peak, and the bf16 GA cost in reserved bytes
with the measured one. Its checks become this step's (the dry run: the CUDA ones SKIP); its numbers and
both devices' traces stay in ``allocator/allocator_model*.json`` (not among the probe results)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gf  # noqa: E402


TIMEOUTS = {"allocator_model": 190}   # inner timeout, s (with the runner's reserve it fits the cap in run.sh)
SIZES = "1024,2560"   # one 20 MiB segment between them is 0.072 B/param, a quarter of the GA-cost limit


def main() -> int:
    import allocator_model

    step = gf.Step("allocator")
    results = os.path.join(gf.out_dir(), "allocator")
    cmd = [sys.executable, os.path.join(HERE, "allocator_model.py"), "--out", results, "--precisions", "bf16",
           "--device", "cuda" if step.cuda else "cpu"]
    cmd += ["--sizes", SIZES] if step.cuda else ["--sizes", "64,96", "--vocab", "512", "--heads", "4"]  # dry run: tiny
    code = step.run("allocator_model", cmd, dict(os.environ), TIMEOUTS["allocator_model"])
    limits = {**allocator_model.LIMITS, "cpu_trace_ga_cost": allocator_model.ga_cost_limit(
        [int(x) for x in SIZES.split(",")], 4, 8192)}
    step.fact("bounds", [[f"allocator: {name}", f"past {limit}", allocator_model.WHY[name]]
                         for name, limit in limits.items()])
    data = gf.read_json(os.path.join(results, "allocator_model.json"))
    if data is None:
        step.check("the model's comparison ran", ("FAIL", f"allocator_model.py exited {code} without a result"))
        return step.done()
    step.fact("files", ["allocator/allocator_model.json", "allocator/allocator_model_traces.json"])
    if not data.get("complete", True):
        step.check("the model's comparison finished", ("INCOMPLETE", f"allocator_model.py exited {code} after "
                                                       f"{data.get('cells_done')} of {data.get('cells_planned')} cells "
                                                       "(each finished one kept in allocator/allocator_model.json)"))
    for c in data["checks"]:
        if c["status"] == "SKIP" and not step.cuda:
            step.cuda_only(c["name"], None)     # the dry run: SKIP, as every CUDA-only check says it
        else:
            step.check(c["name"], (c["status"], c["detail"]))
    costs = data.get("ga_cost_bf16") or {}
    step.table("allocator model: bf16 GA cost (B/param)", ["measured reserved (CUDA)", "model on the CUDA trace",
                                                           "model on the CPU trace", "CPU live bytes"],
               [[_num(costs.get(k)) for k in ("cuda_measured_reserved", "cuda_trace_model", "cpu_trace_model",
                                               "cpu_live")]])
    return step.done()


def _num(value) -> str:
    return "-" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    sys.exit(main())
