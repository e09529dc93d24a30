"""Step command (planned 10 s on a GPU): the command meter (``bisector run ... -- CMD``) on a plain CUDA loop.

An unmodified-style training script (an MLP, AdamW, 4 optimizer steps) reads its own
``torch.cuda.max_memory_allocated()`` at the end of every ``optimizer.step()``, in a per-optimizer
step post hook (``opt.register_step_post_hook``): torch runs an optimizer's own post hooks before the
global ones (``Optimizer.profile_hook_step``: ``chain(self._optimizer_step_post_hooks.values(),
_global_optimizer_post_hooks.values())``, in torch 2.11 as in 2.13), and the meter's global post hook
reads the same counter and resets it. So the script reads exactly the meter's window, and never
resets the counter itself. The hook also reads how many steps the meter had recorded by then (the
meter object of its process, ``_bisector_command._inprocess.METER``: the records' place is the meter's
secret): i at step i proves that order, on the CPU too.

Checks (checklist.py, ``command.*``): the meter ran the script and saw its 4 steps; the script read
in the meter's window at every step; on CUDA, what ran was CUDA (the meter's device and steps, the
script's own model, not the device asked for), every step's ``cuda_peak_allocated`` and the result's
``step_peak_bytes`` equal the script's own readings within 1%, and NVML's used bytes are at least the
reserved peak; in the dry run (DEV=cpu), the meter's CPU result counted tensors.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gf  # noqa: E402
import verdicts_device as vd  # noqa: E402

METER = os.path.join(os.path.dirname(os.path.dirname(HERE)), "probes", "command", "__main__.py")
TIMEOUTS = {"command": 75}   # inner timeouts, s (with the runner's reserve they fit the cap in run.sh)
STEPS = 4
SCRIPT = """
import json, os, sys, torch
dev = "cuda" if torch.cuda.is_available() and sys.argv[2] == "cuda" else "cpu"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(2048, 8192), torch.nn.GELU(), torch.nn.Linear(8192, 2048)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
own = {{"device": dev, "param_device": next(model.parameters()).device.type, "peaks": [], "meter_steps_seen": []}}
meter = getattr(sys.modules.get("_bisector_command._inprocess"), "METER", None)


def at_step_end(optimizer, args, kwargs):   # before torch's global post hooks: the meter's read and reset
    own["meter_steps_seen"].append(meter.steps if meter is not None else None)
    if dev == "cuda":
        torch.cuda.synchronize()
        own["peaks"].append(torch.cuda.max_memory_allocated())


opt.register_step_post_hook(at_step_end)
for step in range({steps}):
    x = torch.randn(64, 2048, device=dev)
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
json.dump(own, open(sys.argv[1], "w"))
"""


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
    step.fact("script", own)
    if not step.check("command.ran", vd.command_ran(code, result, STEPS)):
        return step.done()
    step.check("command.window", vd.command_window(own, STEPS))
    if not step.cuda:
        step.check("command.cpu_meter", vd.command_cpu_meter(result))
    step.cuda_only("command.on_cuda", lambda: vd.command_on_cuda(result, own))
    step.cuda_only("command.vs_script", lambda: vd.command_vs_script(result, own))
    step.cuda_only("command.nvml", lambda: vd.command_nvml(result))
    return step.done()


if __name__ == "__main__":
    sys.exit(main())
