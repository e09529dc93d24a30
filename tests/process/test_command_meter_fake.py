"""The command meter's fake mode (``--fake``, issue 48 item 6): the user's unchanged program runs on fake tensors
from its ``import torch`` on, its step peak the fake tensors' live bytes (the same bytes as the real run, to the
byte, on a plain loop), a NaN check answered, a DataLoader's batches real, and a read of a value (``loss.item()``)
stopping the program at its line, said in the result instead of a number. Real processes, the shared base's torch."""
from __future__ import annotations

import sys

from tests.support.command_meter import LOOP, MB, meter, write

# the plain loop without its print of values (LOOP reads loss.item() and w.sum().item() every step)
SILENT = LOOP.replace('    print(f"step {{step}} loss {{loss.item():.6f}} w {{w.sum().item():.6f}}")\n', "")

# a loop as Trainer runs it: batches from a DataLoader over a shuffled dataset, the NaN filter on the loss
LOADER = """
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = TensorDataset(torch.randn(32, 64), torch.randn(32, 64))
for x, y in DataLoader(data, batch_size=8, shuffle=True):
    loss = (model(x) - y).square().mean()
    if torch.isnan(loss) or torch.isinf(loss):   # transformers.Trainer's filter of a step's loss
        raise SystemExit("nan")
    loss.backward()
    opt.step()
    opt.zero_grad()
print("trained")
"""


def test_a_plain_loop_counts_the_same_bytes_fake_as_real(tmp_path):
    write(tmp_path, "train.py", SILENT.format(steps=3, mb=MB))
    real_done, real = meter(tmp_path, sys.executable, "train.py")
    fake_done, fake = meter(tmp_path, sys.executable, "train.py", args=("--fake",))
    assert real_done.returncode == fake_done.returncode == 0, fake_done.stderr[-2000:]
    assert real["meter"] == "cpu-dispatch" and fake["meter"] == "cpu-dispatch (fake)"
    for name in ("step_peak_bytes", "peak_bytes", "optimizer_steps"):
        assert fake["metrics"][name] == real["metrics"][name], name
    assert MB <= fake["metrics"]["step_peak_bytes"] < MB + 8192
    # the sites too: the 10 MB temporary at its line of train.py, in both
    assert [r["site"] for r in fake["sites"]["rows"]] == [r["site"] for r in real["sites"]["rows"]]
    assert fake["sites"]["rows"][0]["site"] == "uint8 | train.py:6 <module>"
    assert fake["metrics"]["rss_peak_bytes"] < real["metrics"]["rss_peak_bytes"] + 64 * MB
    # fake tensors carry no values: the numbers the real run reads are never read (never a number of nothing)
    assert "grad_norm_first" in real["metrics"]
    assert not [k for k in fake["metrics"] if k.startswith(("loss", "grad_norm", "update_norm", "nonfinite"))]


def test_batches_stay_real_and_the_nan_filter_is_answered(tmp_path):
    write(tmp_path, "train.py", LOADER)
    real_done, real = meter(tmp_path, sys.executable, "train.py")
    fake_done, fake = meter(tmp_path, sys.executable, "train.py", args=("--fake",))
    assert fake_done.returncode == 0 and "trained" in fake_done.stdout, fake_done.stderr[-2000:]
    assert fake["metrics"]["optimizer_steps"] == 4 and fake["meter"] == "cpu-dispatch (fake)"
    assert fake["metrics"]["step_peak_bytes"] == real["metrics"]["step_peak_bytes"]


def test_a_value_read_stops_the_program_at_its_line_and_only_the_steps_before_it_count(tmp_path):
    write(tmp_path, "train.py", LOOP.format(steps=3, mb=MB))   # prints loss.item() after each step
    done, r = meter(tmp_path, sys.executable, "train.py", args=("--fake",))
    said = ("fake mode cannot read the value of a float32 scalar tensor (a data-dependent branch or .item()) at "
            "train.py:12 <module>: this step cannot be measured fake")
    # it stopped after its first step, the warm-up (--measure-skip 1): nothing measured, no number
    assert done.returncode == 1 and r["metrics"] == {} and r["meter"] == "cpu-dispatch (fake)"
    assert r["fake_refused"] == r["error"] == said
    assert done.stderr.strip().splitlines()[-1].startswith("_bisector_meters.fake_reads.ValueRead: fake mode cannot")
    # with no warm-up left out, that first step is measured: the number, and where the program stopped
    done, r = meter(tmp_path, sys.executable, "train.py", args=("--fake", "--measure-skip", "0"))
    assert done.returncode == 0 and r["metrics"]["optimizer_steps"] == 1 and "error" not in r
    assert 5 * MB <= r["metrics"]["step_peak_bytes"] < 5 * MB + 8192   # step 0's 50 MB temporary
    assert r["fake_stopped"] == "after 1 optimizer step (those it finished are measured): " + said


def test_a_program_that_catches_the_refusal_is_measured_only_up_to_it(tmp_path):
    """After a refused read the program goes on without the value it asked for: its later steps are no number."""
    write(tmp_path, "train.py", LOOP.format(steps=3, mb=MB).replace(
        '    print(f"step', '    try:\n        print(f"step').replace(
        '.item():.6f}")\n', '.item():.6f}")\n    except Exception:\n        pass\n'))
    done, r = meter(tmp_path, sys.executable, "train.py", args=("--fake", "--measure-skip", "0"))
    assert done.returncode == 0 and r["metrics"]["optimizer_steps"] == 1, r
    assert 5 * MB <= r["metrics"]["step_peak_bytes"] < 5 * MB + 8192 and r["metrics"]["peak_bytes"] < 6 * MB
