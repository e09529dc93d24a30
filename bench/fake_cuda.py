"""CUDA's autocast on fake CUDA tensors, with no GPU: how far it goes, and the seed's forward at its own shape under
CUDA's autocast rules against the same forward on fake CPU tensors under the CPU's, both through the allocator model.

autocast's op lists differ between the devices (on CUDA softmax, layer_norm and the losses run in fp32; on the CPU
in bf16), so a CPU trace is not what a GPU allocates. A CUDA build of torch makes fake ``cuda`` tensors with no
GPU and no driver, once three CUDA calls are answered here: ``torch.cuda._lazy_init`` does nothing (every CUDA
tensor is fake, none is made; a factory given ``device="cuda"`` initialises CUDA before any mode sees it), and
autocast is told CUDA and its bf16 are there (``amp_definitely_not_available``, ``is_bf16_supported``; else
``torch.autocast("cuda")`` disables itself). The forward then runs CUDA autocast's rules. The backward does not
run: torch's autograd engine asks the driver about device 0 (``GraphTask::stash_current_streams`` ->
``hasPrimaryContext``) and fails with no GPU, so a fake CUDA *training step* (and its GA cost) needs a GPU in
torch 2.13; this bench measures what can be measured, the forward (docs/allocator.md, "CUDA's autocast without a
GPU"). Run it with a CUDA torch (gigabytes: a throwaway venv, never CI)::

    uv venv /tmp/cudatorch && uv pip install --python /tmp/cudatorch/bin/python torch==2.13.0 \\
        transformers==4.32.0 accelerate==0.22.0 'numpy<2'
    /tmp/cudatorch/bin/python bench/fake_cuda.py [--model-config llama-7b] [--sizes 4096]

For each device and precision (fp32; bf16 = fp32 weights under autocast, as accelerate wraps the forward): the
forward of a micro-step in train mode with gradient checkpointing, batch 1, 8 tokens, its live peak, the bytes it
created by dtype, and the allocator model's reserved peak for the window; then the backward is tried once on
each device and its outcome printed.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "probes", "ga_memory"), os.path.join(ROOT, "probes")]

import torch  # noqa: E402

from _allocator_model.conf import parse_alloc_conf  # noqa: E402
from _allocator_model.replay import AllocatorEstimate  # noqa: E402
from _cli import make_spec, parser  # noqa: E402
from _meters.fake_mode import FakeSession, FakeStorageMeter  # noqa: E402
from _models.build import build_model, make_batches  # noqa: E402

GIB = 1 << 30


def pretend_cuda() -> None:
    """No GPU: CUDA's lazy init does nothing (only fake CUDA tensors exist), autocast sees CUDA and bf16."""
    if not torch.version.cuda:
        sys.exit(f"torch {torch.__version__} is a CPU build: fake CUDA tensors need a CUDA build of torch")
    torch.cuda._lazy_init = lambda: None
    torch.cuda.amp.common.amp_definitely_not_available = lambda: False
    torch.cuda.is_bf16_supported = lambda *args, **kwargs: True


def forward_window(spec, hidden, device, precision):
    """(live peak, estimated reserved peak, bytes created by dtype, parameters) of one fake forward."""
    spec = {**spec, "device": device}
    with FakeSession():
        with FakeSession.real():
            batch = make_batches(spec, 1, "cpu", spec["seq_lens"][0])[0]
        batch = {k: torch.empty_like(v, device=device) for k, v in batch.items()}
        model, facts = build_model(spec, hidden)
        meter = FakeStorageMeter(device_type=device, allocations=AllocatorEstimate(parse_alloc_conf(None)))
        meter.track(model.parameters())
        meter.track(batch.values())
        with meter:
            meter.reset_peak()
            meter.mark("m0.forward")
            with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = model(**batch).loss
            meter.mark(None)
            backward = _try_backward(loss)
        report = meter.report()
        meter.close()
    return (report["peak_bytes"], report.get("est_reserved_peak_bytes"), report["dtype_bytes"], facts["n_params"],
            backward)


def _try_backward(loss) -> str:
    try:
        loss.backward()
    except Exception as exc:  # noqa: BLE001 - the finding is the error
        return f"fails: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    return "runs"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-config", default="llama-7b")
    ap.add_argument("--sizes", default=None, help="widths (default: the shape's own)")
    args = ap.parse_args(argv)
    pretend_cuda()
    flags = ["--device", "cpu", "--fake", "--model-config", args.model_config]
    spec = make_spec(parser().parse_args(flags + (["--sizes", args.sizes] if args.sizes else [])))
    import transformers

    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, GPUs seen: {torch.cuda.device_count()}), "
          f"transformers {transformers.__version__}; {args.model_config} forward, train mode, gradient "
          f"checkpointing, batch 1, 8 tokens; load {os.getloadavg()[0]:.1f}")
    for hidden in spec["sizes"]:
        rows = {}
        for device in ("cpu", "cuda"):
            for precision in ("fp32", "bf16"):
                start = time.perf_counter()
                rows[device, precision] = (*forward_window(spec, hidden, device, precision),
                                           time.perf_counter() - start)
        n = rows["cpu", "fp32"][3]
        print(f"\nwidth {hidden}, {n:,} parameters: the forward's peak (live / est. reserved), created by dtype")
        for (device, precision), (peak, reserved, dtypes, _, backward, seconds) in rows.items():
            made = ", ".join(f"{d} {b / GIB:.3f} GiB" for d, b in sorted(dtypes.items()) if b >= 1 << 20)
            print(f"  fake {device:<4} {precision}: {peak / GIB:7.3f} / {reserved / GIB:7.3f} GiB  ({made}; "
                  f"{seconds:.0f} s; backward {backward})")
        for device in ("cpu", "cuda"):
            live = (rows[device, "bf16"][0] - rows[device, "fp32"][0]) / n
            est = (rows[device, "bf16"][1] - rows[device, "fp32"][1]) / n
            print(f"  {device} autocast: the bf16 forward holds {live:+.3f} B/param live, {est:+.3f} B/param est. "
                  f"reserved beyond fp32's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
