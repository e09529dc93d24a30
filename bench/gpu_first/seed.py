"""Step seed (planned 150 s on a GPU): the seed report's own shapes, pythia-1.4b then llama-7b
(random weights, built on the GPU), through Trainer as the reporter ran them: SGD, batch 1, 8 tokens,
gradient checkpointing, bf16 and fp32, GA 1 and 2, one interpreter per cell. The GA cost (GA=2 minus
GA=1, bytes per parameter) from the allocated peak, the reserved peak and NVML's device-wide used,
beside the seed's (NVML); passes when bf16's GA cost exceeds fp32's by >= 1.0 B/param and fp32's is
at most the fp32 embedding gradient's own B/param (vocab x hidden x 4 B over the parameters, from the
result itself: 0.291 for pythia-1.4b) plus 0.2 (allocated; verdicts.BOUNDS says why). The dry run:
the same shapes at width 64, criteria not judged."""
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


def main():
    step = gf.Step("seed")
    rows = []
    for shape, seed in verdicts.SEED.items():
        code, result = step.probe(shape, "--model-config", shape, *SEED_ARGS, *([] if step.cuda else DRY_RUN),
                                  timeout=TIMEOUTS[shape])
        if not step.check(f"{shape}: all four cells measured", verdicts.all_measured(code, result)):
            continue
        costs = verdicts.ga_costs(result)
        n = next(iter(verdicts.measured(result).values()))["n_params"]
        for prec in ("bf16", "fp32"):
            got = costs.get(prec, {})
            rows.append([shape, prec, f"{seed[prec]:.2f}"] +
                        [f"{got[col]:.3f}" if col in got else "-" for col, _ in verdicts.COLUMNS] + [f"{n:,}"])
        step.table("The seed at its own scale: GA=2 minus GA=1, bytes per parameter",
                   ["model", "precision", "seed (NVML)"] + [f"ours: {col}" for col, _ in verdicts.COLUMNS] +
                   ["parameters"], rows)
        bound, floor = verdicts.fp32_bound(result)
        step.fact(f"{shape}: fp32 bound", {"embedding_bpp": floor, "margin": verdicts.FP32_MARGIN, "bound": bound})
        step.cuda_only(f"{shape}: bf16 GA cost - fp32 GA cost >= {verdicts.MIN_EXCESS}, fp32 <= embedding "
                       f"{'?' if floor is None else f'{floor:.3f}'} + {verdicts.FP32_MARGIN}",
                       lambda: verdicts.seed_criteria(costs, bound))
    return step.done()


if __name__ == "__main__":
    sys.exit(main())
