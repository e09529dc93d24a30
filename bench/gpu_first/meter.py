"""Step meter (planned 60 s on a GPU): the probe's CUDA meter against an independent reading of
``torch.cuda.max_memory_allocated`` over the same cells (reference.py): exact expected, 1% allowed.
Two pairs, each in one process per side: the accelerate loop at two widths (the oom step sizes its cap
between them), fp32 and bf16, GA 1 and 2; and the Trainer loop (its window opens and closes in
Trainer's callbacks) at the smaller width, fp32 and bf16, GA 1 and 2."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gf  # noqa: E402
import verdicts  # noqa: E402

CELLS = ["--precisions", "fp32,bf16", "--ga", "1,2", "--isolate", "off", "--no-attribution"]
# inner timeouts, s, in the order they run (with the runner's reserve they fit the cap in run.sh)
TIMEOUTS = {"probe": 55, "reference": 55, "trainer": 55, "trainer.reference": 55}


def pair(step, label, args):
    """The probe and the reference run over the same cells; the probe's result."""
    code, result = step.probe(label, *args, timeout=TIMEOUTS[label])
    step.check(f"{label}: the probe measured every cell", verdicts.all_measured(code, result))
    name = f"{label}.reference" if label != "probe" else "reference"
    out = os.path.join(gf.out_dir(), "results", f"meter.{name}.json")
    ref_code = step.run(name, [sys.executable, os.path.join(HERE, "reference.py"), out, "--device", step.dev, *args],
                        dict(os.environ), TIMEOUTS[name])
    reference = gf.read_json(out)
    step.check(f"{label}: the reference run measured every cell", verdicts.ok("all cells")
               if ref_code == 0 and reference else verdicts.fail(f"exit {ref_code}: {(reference or {}).get('errors')}"))
    step.cuda_only(f"{label}: the meter's allocated peaks equal torch.cuda.max_memory_allocated's (within 1%)",
                   lambda: verdicts.meter_vs_reference(result, reference))
    return result


def main():
    step = gf.Step("meter")
    pair(step, "probe", gf.widths(step, 1024, 2048) + CELLS)
    pair(step, "trainer", gf.widths(step, 1024) + CELLS + ["--loop", "trainer"])
    return step.done()


if __name__ == "__main__":
    sys.exit(main())
