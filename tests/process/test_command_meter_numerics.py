"""The command meter reads the numbers of each optimizer step (probes/command/_numerics.py) of an unchanged program:
the loss it backpropagates, the norm of the gradients the step applies and of the change it makes, per rank;
without changing what the program computes or prints, and without counting its own ops in the step's bytes."""
from __future__ import annotations

import math
import sys

from tests.support.command_meter import LOOP, MB, launch, meter, plain
from tests.support.command_meter import write as _write

# GA=2: each step backpropagates two micro-batch losses; the program prints its own numbers (repr: every digit),
# computed its own way, so the meter's can be compared with them
GA_LOOP = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(3):
    losses = []
    for micro in range(2):
        x = torch.randn(4 + micro, 16)
        loss = model(x).square().mean() / 2
        loss.backward()
        losses.append(loss.item())
    with torch.no_grad():
        grad = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()
        before = [p.detach().clone() for p in model.parameters()]
    opt.step()
    with torch.no_grad():
        update = torch.cat([(p - b).flatten() for p, b in zip(model.parameters(), before)]).norm().item()
    opt.zero_grad()
    print(f"step {step} losses {losses!r} grad {grad!r} update {update!r}")
"""


def _printed(stdout: str) -> list[dict]:
    rows = []
    for line in stdout.splitlines():
        _, _, rest = line.partition(" losses ")
        losses, _, rest = rest.partition(" grad ")
        grad, _, update = rest.partition(" update ")
        rows.append({"losses": eval(losses), "grad": float(grad), "update": float(update)})  # noqa: S307 - our own
    return rows


def test_each_step_holds_the_loss_it_backpropagated_and_the_norms_of_its_gradients_and_update(tmp_path):
    _write(tmp_path, "train.py", GA_LOOP)
    alone = plain(tmp_path, sys.executable, "train.py")
    done, r = meter(tmp_path, sys.executable, "train.py")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == alone.stdout   # the program computes and prints the same, to the last digit
    own = _printed(alone.stdout)
    steps = r["steps"]
    assert len(steps) == 3
    for mine, theirs in zip(steps, own):
        assert mine["loss_count"] == 2 and mine["loss"] == math.fsum(theirs["losses"])   # as computed, summed
        assert math.isclose(mine["grad_norm"], theirs["grad"], rel_tol=1e-6)
        assert math.isclose(mine["update_norm"], theirs["update"], rel_tol=1e-5)
    m = r["metrics"]
    assert m["loss_first"] == steps[0]["loss"] and m["loss_last"] == steps[-1]["loss"]   # warm-up included
    assert math.isclose(m["loss_mean"], sum(s["loss"] for s in steps) / 3)
    assert m["grad_norm_first"] == steps[0]["grad_norm"] and m["grad_norm_last"] == steps[-1]["grad_norm"]
    assert m["update_norm_last"] == steps[-1]["update_norm"] and m["nonfinite_steps"] == 0
    assert r["units"]["loss_first"] == "" and r["units"]["nonfinite_steps"] == "count"


def test_memory_metrics_are_the_same_with_and_without_the_numbers(tmp_path):
    """The meter's own reads (norms, the update's copy and buffers) are never in the step's tensor bytes."""
    _write(tmp_path, "train.py", LOOP.format(steps=4, mb=MB))
    _, on = meter(tmp_path, sys.executable, "train.py")
    _, off = meter(tmp_path, sys.executable, "train.py", args=("--numerics", "off"))
    assert "update_norm" in on["steps"][1] and "loss" not in off["steps"][1]   # read, and not read
    for name in ("step_peak_bytes", "peak_bytes"):
        assert on["metrics"][name] == off["metrics"][name]
    for a, b in zip(on["steps"], off["steps"]):
        assert (a["peak_bytes"], a["end_bytes"], a["pre_step_bytes"]) == (b["peak_bytes"], b["end_bytes"],
                                                                          b["pre_step_bytes"])
    assert "loss_first" not in off["metrics"]


def test_a_nan_is_counted_never_a_number_and_update_norm_beyond_its_limit_says_why(tmp_path):
    _write(tmp_path, "train.py", """
        import torch
        w = torch.nn.Parameter(torch.ones(8))
        opt = torch.optim.SGD([w], lr=0.1)
        for step in range(3):
            loss = (w * (float("nan") if step == 1 else 1.0)).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            with torch.no_grad():
                w.fill_(1.0)
        """)
    done, r = meter(tmp_path, sys.executable, "train.py", args=("--update-norm-max", "0"))
    assert done.returncode == 0, done.stderr[-2000:]
    m, absent = r["metrics"], r["absent"]
    assert m["nonfinite_steps"] == 1 and m["loss_first"] == 8.0 and m["loss_last"] == 8.0
    assert r["steps"][1]["loss"] == "nan" and r["steps"][1]["grad_norm"] == "nan"
    assert "loss_mean" not in m and "not finite (nan) at 1 step(s)" in absent["loss_mean"]
    assert "update_norm_last" not in m and "beyond the 0 MiB" in absent["update_norm_last"]


def test_what_is_not_a_loss_is_not_counted(tmp_path):
    """torch.autograd.grad backpropagates no loss of the step; reentrant checkpointing's inner backward is not
    the program's loss; a backward with a gradient argument is not a scalar."""
    _write(tmp_path, "train.py", """
        import torch
        from torch.utils.checkpoint import checkpoint
        lin = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(lin.parameters(), lr=0.1)
        x = torch.ones(2, 8, requires_grad=True)
        for step in range(2):
            loss = checkpoint(lin, x, use_reentrant=True).sum()
            loss.backward()   # the checkpoint runs a backward of its own inside this one
            opt.step(); opt.zero_grad()
        g = torch.autograd.grad(lin(x).sum(), lin.weight)[0]
        lin.weight.grad = g
        opt.step()
        out = lin(x)
        out.backward(torch.ones_like(out))
        opt.step()
        """)
    done, r = meter(tmp_path, sys.executable, "train.py")
    assert done.returncode == 0, done.stderr[-2000:]
    steps = r["steps"]
    assert [s.get("loss_count") for s in steps] == [1, 1, None, None]
    assert steps[3]["loss_nonscalar"] == 1 and "grad_norm" in steps[2]
    assert "loss_last" not in r["metrics"] and "non-scalars" in r["absent"]["loss_last"]


def test_each_rank_has_its_own_numbers_and_the_metric_is_the_lowest_ranks(tmp_path):
    _write(tmp_path, "ddp.py", """
        import os, torch, torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 16))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(2):
            loss = model(torch.ones(4, 16) * (rank + 1)).square().mean()
            loss.backward()
            opt.step(); opt.zero_grad()
            os.write(1, f"rank {rank} step {step} loss {loss.item()!r}\\n".encode())
        dist.destroy_process_group()
        """)
    done, r = meter(tmp_path, *launch("torchrun", 2, "ddp.py"), timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = {tuple(line.split()[1:4:2]): float(line.split()[-1]) for line in done.stdout.splitlines()}
    m = r["metrics"]
    assert m["loss_first.rank0"] == printed[("0", "0")] and m["loss_first.rank1"] == printed[("1", "0")]
    assert m["loss_first"] == m["loss_first.rank0"] != m["loss_first.rank1"]
    assert m["grad_norm_first.rank0"] == m["grad_norm_first.rank1"]   # DDP averaged them: the same gradients
