"""Step seed (planned 140 s on a GPU): the seed report's own shapes, pythia-1.4b then llama-7b
(random weights, built on the GPU), through Trainer as the reporter ran them: SGD, batch 1, 8 tokens,
gradient checkpointing, bf16 and fp32, GA 1 and 2, one interpreter per cell. The GA cost (GA=2 minus
GA=1, bytes per parameter) from the allocated peak, the reserved peak and NVML's device-wide used,
beside the seed's (NVML). Fails when fp32's GA cost (allocated) is above the fp32 embedding
gradient's own B/param (vocab x hidden x 4 B over the parameters, from the result itself: 0.291 for
pythia-1.4b) plus 0.2 (checklist.py says why); bf16's GA cost over fp32's is a FINDING, reported
beside the CPU's, never a failure. The dry run: the same shapes at width 64, criteria not judged."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gf  # noqa: E402
import verdicts  # noqa: E402

SEED_ARGS = ["--loop", "trainer", "--precisions", "fp32,bf16", "--ga", "1,2", "--optimizer", "sgd", "--seq-len", "8",
             "--batch", "1", "--gradient-checkpointing", "--no-attribution"]
DRY_RUN = ["--sizes", "64", "--layers", "2", "--heads", "4", "--vocab", "512"]
TIMEOUTS = {"pythia-1.4b": 120, "llama-7b": 170}   # inner timeouts, s (with the reserve within the cap)


def rows(shape: str, result) -> list:
    """The seed table's rows of one shape: any number the result lacks is '-', never a crash."""
    costs, seed = verdicts.ga_costs(result), verdicts.SEED[shape]
    n = next((c.get("n_params") for c in verdicts.measured(result).values()), None)
    return [[shape, prec, gf.num(seed[prec], ".2f")] +
            [gf.num((costs.get(prec) or {}).get(col), ".3f") for col, _ in verdicts.COLUMNS] + [gf.num(n, ",")]
            for prec in ("bf16", "fp32")]


def main():
    step = gf.Step("seed")
    table = []
    for shape in verdicts.SEED:
        code, result = step.probe(shape, "--model-config", shape, *SEED_ARGS, *([] if step.cuda else DRY_RUN),
                                  timeout=TIMEOUTS[shape])
        if not step.check("seed.measured", verdicts.all_measured(code, result), shape=shape):
            continue
        table += rows(shape, result)
        step.table("The seed at its own scale: GA=2 minus GA=1, bytes per parameter",
                   ["model", "precision", "seed (NVML)"] + [f"ours: {col}" for col, _ in verdicts.COLUMNS] +
                   ["parameters"], table)
        costs = verdicts.ga_costs(result)
        bound, floor = verdicts.fp32_bound(result)
        step.fact(f"{shape}: fp32 bound", {"embedding_bpp": floor, "margin": verdicts.FP32_MARGIN, "bound": bound})
        step.cuda_only("seed.fp32", lambda: verdicts.seed_fp32(costs, bound), shape=shape)
        step.cuda_only("seed.bf16_excess", lambda: verdicts.seed_bf16_excess(costs), shape=shape)
    return step.done()


if __name__ == "__main__":
    sys.exit(main())
