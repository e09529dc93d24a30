"""Running the command meter (probes/command) over a real program, as the process tests of the meter do."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

METER = Path(__file__).resolve().parents[2] / "probes" / "command" / "__main__.py"
MB = 10_000_000

# step 0 (warm-up) holds a 50 MB temporary, later steps 10 MB: the step peaks are known to the byte
# apart from the tiny parameter, its gradient and the loss scalars
LOOP = """
import torch
w = torch.nn.Parameter(torch.zeros(256))
opt = torch.optim.SGD([w], lr=0.1)
for step in range({steps}):
    big = torch.ones({mb} * (5 if step == 0 else 1), dtype=torch.uint8)
    loss = (w * big[:256].float()).sum()
    del big
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {{step}} loss {{loss.item():.6f}} w {{w.sum().item():.6f}}")
"""

# a data-parallel loop that runs alone, under torchrun and under accelerate launch (gloo on the CPU): each step
# holds a 10 MB temporary; prints its losses; ends with or without destroy_process_group
DDP = """
import os
import torch
import torch.distributed as dist

ddp = int(os.environ.get("WORLD_SIZE", "1")) > 1
if ddp:
    dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
if ddp:
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
rank = int(os.environ.get("RANK", "0"))
for step in range({steps}):
    scratch = torch.ones({mb}, dtype=torch.uint8)
    loss = model(torch.ones(4, 64) * (rank + 1)).square().mean()
    loss.backward()
    del scratch
    opt.step()
    opt.zero_grad()
    os.write(1, f"rank {{rank}} step {{step}} loss {{loss.item():.6f}}\\n".encode())   # one write: ranks share stdout
if ddp and {destroy}:
    dist.destroy_process_group()
"""


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(textwrap.dedent(text))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(how: str, procs: int, script: str) -> list[str]:
    """The argv that starts ``script`` with ``how`` (python, torchrun, accelerate) on ``procs`` CPU processes."""
    if how == "python":
        return [sys.executable, script]
    port = str(free_port())
    if how == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs), "--master_port", port,
                script]
    # several processes: accelerate's distributed launcher (torch's elastic agent; gloo where there is no GPU)
    several = ["--multi_gpu"] if procs > 1 else ["--cpu"]
    return [sys.executable, "-m", "accelerate.commands.launch", *several, "--num_processes", str(procs),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", port,
            script]


def clean_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("BISECTOR_RESULT", "PYTHONPATH")}
    env.update({"BISECTOR_DEVICE": "cpu", "OMP_NUM_THREADS": "1", **(extra or {})})
    return env


def meter(tmp: Path, *command: str, args: tuple = (), env: dict | None = None, timeout: float = 180,
          python: str = sys.executable):
    """(completed process, result dict or None) of the meter (run by ``python``) over ``command``, run in ``tmp``."""
    result = tmp / "result.json"
    result.unlink(missing_ok=True)
    done = subprocess.run([python, str(METER), *args, "--result", str(result), "--", *command], cwd=tmp,
                          capture_output=True, text=True, timeout=timeout, env=clean_env(env))
    return done, (json.loads(result.read_text()) if result.exists() else None)


def plain(tmp: Path, *command: str, env: dict | None = None, timeout: float = 180):
    """The same command without the meter."""
    return subprocess.run(list(command), cwd=tmp, capture_output=True, text=True, timeout=timeout,
                          env=clean_env(env))
