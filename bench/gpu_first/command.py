"""Step command (planned 20 s on a GPU): the command meter (``bisector run ... -- CMD``) on a plain CUDA loop.

An unmodified-style training script (an MLP, AdamW, 4 optimizer steps) records its own
``torch.cuda.max_memory_allocated()`` for each step (reset right after each ``optimizer.step()``) to a
file; ``probes/command`` runs it with the meter injected. Checks: the meter measured with ``cuda`` on a
device of type ``cuda`` and saw every step; its ``step_peak_bytes`` is the script's own largest measured
step peak within 1% (they read the same counter, so exactly equal is expected); NVML's device-wide used
bytes are at least the reserved peak. In the dry run (DEV=cpu) the meter's CPU result is checked for its
steps and its tensor meter, and the CUDA comparisons SKIP.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gf  # noqa: E402
import verdicts  # noqa: E402

METER = os.path.join(os.path.dirname(os.path.dirname(HERE)), "probes", "command", "__main__.py")
TIMEOUTS = {"command": 75}   # inner timeouts, s (with the runner's reserve they fit the cap in run.sh)
STEPS = 4
SCRIPT = """
import json, sys, torch
dev = "cuda" if torch.cuda.is_available() and sys.argv[2] == "cuda" else "cpu"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(2048, 8192), torch.nn.GELU(), torch.nn.Linear(8192, 2048)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
peaks = []
for step in range({steps}):
    x = torch.randn(64, 2048, device=dev)
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    if dev == "cuda":
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated())
        torch.cuda.reset_peak_memory_stats()
json.dump({{"device": dev, "peaks": peaks}}, open(sys.argv[1], "w"))
"""


def compare(result, own):
    """The meter's step peak against the script's own max_memory_allocated over the measured steps."""
    if not result or not own or not own.get("peaks"):
        return verdicts.fail(f"no result ({bool(result)}) or no reference peaks ({own})")
    theirs = max(own["peaks"][1:])   # the meter leaves the first step out (--measure-skip 1)
    ours = result["metrics"].get("step_peak_bytes")
    if ours is None or abs(ours - theirs) > verdicts.TOLERANCE * theirs:
        return verdicts.fail(f"meter {ours}, the script's own max_memory_allocated {theirs}")
    return verdicts.ok(f"meter {ours:.0f} B, script {theirs:.0f} B ({'exactly equal' if ours == theirs else 'within 1%'})")


def nvml_at_least_reserved(result):
    m = (result or {}).get("metrics", {})
    used, reserved = m.get("nvml_used_peak_bytes"), m.get("cuda_reserved_peak_bytes")
    if used is None or reserved is None:
        return verdicts.fail(f"nvml_used_peak_bytes {used}, cuda_reserved_peak_bytes {reserved}: "
                             f"{(result or {}).get('absent', {}).get('nvml_used_peak_bytes')}")
    return (verdicts.ok if used >= reserved else verdicts.fail)(f"NVML used {used} B, reserved peak {reserved} B")


def main():
    step = gf.Step("command")
    work = os.path.join(gf.out_dir(), "command")   # not results/: that holds ga_memory's results, which the host reads
    os.makedirs(work, exist_ok=True)
    script, own_path = os.path.join(work, "command_loop.py"), os.path.join(work, "command.own.json")
    result_path = os.path.join(work, "command.result.json")
    with open(script, "w") as fh:
        fh.write(SCRIPT.format(steps=STEPS))
    for path in (own_path, result_path):
        if os.path.exists(path):
            os.remove(path)
    env = {**os.environ, "BISECTOR_RESULT": result_path, "BISECTOR_DEVICE": step.dev, "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)
    code = step.run("command meter", [sys.executable, METER, "--", sys.executable, script, own_path, step.dev], env,
                    TIMEOUTS["command"])
    result, own = gf.read_json(result_path), gf.read_json(own_path)
    if result is not None:
        step.fact("metrics", result.get("metrics"))
    steps = (result or {}).get("metrics", {}).get("optimizer_steps")
    step.check(f"the meter ran the script (exit {code}) and saw its {STEPS} optimizer steps",
               verdicts.ok(f"{steps} steps") if code == 0 and steps == STEPS else
               verdicts.fail(f"exit {code}, steps {steps}, error {(result or {}).get('error')}"))
    if not step.cuda:
        meter = (result or {}).get("meter")
        step.check("the dry run's CPU meter counted tensors", verdicts.ok(meter) if meter == "cpu-dispatch"
                   else verdicts.fail(f"meter {meter!r}"))
    step.cuda_only("measured with the CUDA meter on a CUDA device", lambda: verdicts.on_cuda(result))
    step.cuda_only("step_peak_bytes is the script's own max_memory_allocated", lambda: compare(result, own))
    step.cuda_only("NVML's used bytes of this GPU are at least the reserved peak", lambda: nvml_at_least_reserved(result))
    return step.done()


if __name__ == "__main__":
    sys.exit(main())
