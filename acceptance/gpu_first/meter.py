"""Step meter (planned 55 s on a GPU): the probe's CUDA meter against an independent reading of
``torch.cuda.max_memory_allocated`` over the same cells (reference.py): exact expected, 1% allowed.
Two pairs, each in one process per side: the accelerate loop at two widths (the oom step sizes its cap
between them), fp32 and bf16, GA 1 and 2; and the Trainer loop (its window opens and closes in
Trainer's callbacks) at the smaller width, fp32 and bf16, GA 1 and 2. A side cut by the step's
deadline keeps its finished cells (both write after every cell) and its checks are INCOMPLETE."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gf  # noqa: E402
import verdicts  # noqa: E402
import verdicts_device  # noqa: E402

CELLS = ["--precisions", "fp32,bf16", "--ga", "1,2", "--isolate", "off", "--no-attribution"]
# inner timeouts, s, in the order they run (with the runner's reserve they fit the cap in run.sh)
TIMEOUTS = {"probe": 55, "reference": 55, "trainer": 55, "trainer.reference": 55}


def reference_verdict(code, reference):
    """reference.py exited 0 and read a peak in every cell (cut: INCOMPLETE, finished cells kept)."""
    errors = (reference or {}).get("errors") or {}
    if verdicts.cut(code) and not errors:
        return verdicts.incomplete(f"{verdicts.said(code)}: {len((reference or {}).get('cells') or {})} cells "
                                   "finished and kept")
    if code != 0 or not reference or errors or verdicts.unfinished(reference):
        return verdicts.fail(f"{verdicts.said(code)}: errors {errors or (reference or {}).get('partial')}")
    return verdicts.ok(f"{len(reference['cells'])} cells")


def pair(step, label, args):
    """The probe and the reference run over the same cells; the probe's result."""
    code, result = step.probe(label, *args, timeout=TIMEOUTS[label])
    step.check("meter.measured", verdicts.all_measured(code, result), label=label)
    name = f"{label}.reference" if label != "probe" else "reference"
    out = os.path.join(gf.out_dir(), "results", f"meter.{name}.json")
    if os.path.exists(out):
        os.remove(out)
    ref_code = step.run(name, [sys.executable, os.path.join(HERE, "reference.py"), out, "--device", step.dev, *args],
                        dict(os.environ), TIMEOUTS[name])
    reference = gf.read_json(out)
    step.check("meter.reference", reference_verdict(ref_code, reference), label=label)
    step.cuda_only("meter.reference_on_cuda", lambda: verdicts_device.reference_on_cuda(reference, ref_code),
                   label=label)
    step.cuda_only("meter.vs_reference", lambda: verdicts.meter_vs_reference(result, reference, code, ref_code),
                   label=label)
    return result


def main():
    step = gf.Step("meter")
    pair(step, "probe", gf.widths(step, 1024, 2048) + CELLS)
    pair(step, "trainer", gf.widths(step, 1024) + CELLS + ["--loop", "trainer"])
    return step.done()


if __name__ == "__main__":
    sys.exit(main())
