"""Step meter (planned 35 s on a GPU): the probe's CUDA meter against an independent reading of
``torch.cuda.max_memory_allocated`` over the same cells (reference.py): exact expected, 1% allowed.
Two widths (the oom step sizes its cap between them), fp32 and bf16, GA 1 and 2, in one process."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gf  # noqa: E402
import verdicts  # noqa: E402

CELLS = ["--precisions", "fp32,bf16", "--ga", "1,2", "--isolate", "off", "--no-attribution"]


def main():
    step = gf.Step("meter")
    args = gf.widths(step, 1024, 2048) + CELLS
    code, result = step.probe("probe", *args, timeout=150)
    step.check("the probe measured every cell", verdicts.all_measured(code, result))
    out = os.path.join(gf.out_dir(), "results", "meter.reference.json")
    ref_code, seconds = gf.run([sys.executable, os.path.join(HERE, "reference.py"), out, "--device", step.dev, *args],
                               dict(os.environ), 150)
    step.fact("reference_seconds", round(seconds, 1))
    reference = gf.read_json(out)
    step.check("the reference run measured every cell", verdicts.ok("all cells") if ref_code == 0 and reference
               else verdicts.fail(f"exit {ref_code}: {(reference or {}).get('errors')}"))
    step.cuda_only("the meter's allocated peaks equal torch.cuda.max_memory_allocated's (within 1%)",
                   lambda: verdicts.meter_vs_reference(result, reference))
    return step.done()


if __name__ == "__main__":
    sys.exit(main())
