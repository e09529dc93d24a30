"""Step precision (planned 30 s on a GPU): every precision proved from what the forward did
(autocast and output dtypes), fp32, bf16 and fp16 in the accelerate loop and bf16 and fp16 through
Trainer, GA 1 and 2; fp16 warm-up steps the GradScaler skipped are counted. (The dry run: fp32 and
bf16 only, CPU fp16 cannot be proved.)"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gf  # noqa: E402
import verdicts  # noqa: E402

# inner timeouts, s, in the order they run (with the runner's reserve they fit the cap in run.sh)
TIMEOUTS = {"accelerate": 85, "trainer": 85}


def main():
    step = gf.Step("precision")
    accelerate = "fp32,bf16,fp16" if step.cuda else "fp32,bf16"
    trainer = "bf16,fp16" if step.cuda else "bf16"
    base = gf.widths(step, 1024) + ["--isolate", "off", "--no-attribution", "--ga", "1,2"]
    code, result = step.probe("accelerate", *base, "--precisions", accelerate, timeout=TIMEOUTS["accelerate"])
    step.check("precision.accelerate", verdicts.precision(code, result), precisions=accelerate)
    code, result = step.probe("trainer", *base, "--precisions", trainer, "--loop", "trainer",
                              timeout=TIMEOUTS["trainer"])
    step.check("precision.trainer", verdicts.precision(code, result), precisions=trainer)
    return step.done()


if __name__ == "__main__":
    sys.exit(main())
