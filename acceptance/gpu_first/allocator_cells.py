"""gpu_first step ``allocator_model``'s cells: a torch-only causal LM trained one warm-up and one measured
optimizer step, on CUDA with the allocator's own history recorded (``cuda_cell``, in a fresh interpreter),
or on the CPU under the probe's CPU meter with the allocator model estimating (``cpu_cell``). Imported by
allocator_model.py, which puts the probe's modules (probes/ga_memory, probes/) on ``sys.path`` first."""
from __future__ import annotations

import math
import os


# --- the CUDA allocator's own history as a model trace (pure) ------------------------------
def trace_from_snapshot(entries, window_start=0) -> dict:
    """Compact trace (``_alloc_trace`` format) from ``_snapshot()["device_traces"][0]``: an ``alloc``
    entry is a request of its size, a ``free_completed`` one frees the block at its address; segment
    and snapshot entries are the allocator's own doing, which the model replays itself.
    ``window_start``: how many entries there were when the measured step began."""
    events, ids, allocs, window = [], {}, 0, None
    for i, entry in enumerate(entries):
        if i == window_start:
            window = len(events)
        action = entry.get("action")
        if action == "alloc":
            ids[entry["addr"]] = allocs
            allocs += 1
            events.append(int(entry["size"]))
        elif action == "free_completed" and entry["addr"] in ids:
            events.append(-(ids.pop(entry["addr"]) + 1))
    window = len(events) if window is None else window
    return {"format": "alloc-trace/1", "events": events, "window": [window, len(events)], "phases": [],
            "truncated": False}


def build_lm(torch, hidden, layers, heads, vocab):
    """A GPT-like causal LM in plain torch (random weights): what the probe's cells train, without
    transformers."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.fc, self.out = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            b, t, h = x.shape
            q, k, v = (z.transpose(1, 2) for z in self.qkv(self.ln1(x)).view(b, t, 3, heads, h // heads).unbind(2))
            att = (q @ k.transpose(-1, -2)) / math.sqrt(h // heads)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            y = (att.masked_fill(mask, float("-inf")).softmax(-1) @ v).transpose(1, 2).reshape(b, t, h)
            x = x + self.proj(y)
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.blocks = nn.Embedding(vocab, hidden), nn.Sequential(*[Block() for _ in range(layers)])
            self.ln, self.head = nn.LayerNorm(hidden), nn.Linear(hidden, vocab, bias=False)

        def forward(self, ids):
            logits = self.head(self.ln(self.blocks(self.emb(ids))))
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
            return loss, logits.dtype

    return LM()


class _NoMarks:
    def mark(self, name):
        pass


def setup(torch, cell, device):
    """Model, optimizer and the batches of both steps, on ``device`` (seeded)."""
    torch.manual_seed(0)
    model = build_lm(torch, cell["hidden"], cell["layers"], cell["heads"], cell["vocab"]).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    steps = [[torch.randint(0, cell["vocab"], (cell["batch"], cell["seq_len"]), device=device)
              for _ in range(cell["ga"])] for _ in range(2)]
    return model, opt, steps


def train(torch, cell, device, model, opt, steps, marks, on_window) -> dict:
    """The warm-up step, ``on_window()``, the measured step; the precision each forward ran in."""
    dtypes = set()
    for s, batches in enumerate(steps):
        if s == 1:
            on_window()
        for i, ids in enumerate(batches):
            marks.mark(f"m{i}.forward")
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=cell["precision"] != "fp32"):
                loss, dtype = model(ids)
            dtypes.add(str(dtype).replace("torch.", ""))
            marks.mark(f"m{i}.backward")
            (loss / cell["ga"]).backward()
            del loss
        marks.mark("step")
        opt.step()
        marks.mark("zero_grad")
        opt.zero_grad(set_to_none=True)
    want = "float32" if cell["precision"] == "fp32" else "bfloat16"
    return {"n_params": sum(p.numel() for p in model.parameters()), "logits_dtype": sorted(dtypes),
            "precision_proved": dtypes == {want}}


def cuda_cell(cell) -> dict:
    """In a fresh interpreter: the measured step's CUDA peaks and the allocator's own trace."""
    import torch

    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=10_000_000)
    model, opt, steps = setup(torch, cell, "cuda")
    start = {}

    def on_window():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start["entries"] = len(torch.cuda.memory._snapshot()["device_traces"][0])
        start["reserved"] = torch.cuda.memory_reserved()

    out = train(torch, cell, "cuda", model, opt, steps, _NoMarks(), on_window)
    torch.cuda.synchronize()
    out.update(max_reserved=torch.cuda.max_memory_reserved(), max_allocated=torch.cuda.max_memory_allocated(),
               reserved_at_window=start["reserved"], meter="cuda",   # the peaks are torch.cuda's counters
               device_type=next(model.parameters()).device.type, device_name=torch.cuda.get_device_name())
    snapshot = torch.cuda.memory._snapshot()
    out["trace"] = trace_from_snapshot(snapshot["device_traces"][0], start["entries"])
    return out


def cpu_cell(torch, cell) -> dict:
    """The cell on the CPU under the probe's meter, set up before the meter as the probe does: the
    trace a CPU user's estimate comes from."""
    import gc

    from _allocator_model.conf import conf_from_env, parse_alloc_conf
    from _allocator_model.replay import AllocatorEstimate
    from _meters.cpu import StorageMeter

    model, opt, steps = setup(torch, cell, "cpu")
    meter = StorageMeter(allocations=AllocatorEstimate(parse_alloc_conf(conf_from_env(os.environ)), keep_trace=True))
    meter.track(model.parameters())
    meter.track(ids for batches in steps for ids in batches)
    gc.collect()
    gc.disable()  # frees at deterministic points, as in the probe's window
    try:
        with meter:
            out = train(torch, cell, "cpu", model, opt, steps, meter, meter.reset_peak)
            meter.mark(None)
    finally:
        gc.enable()
    report = meter.report()
    meter.close()
    estimate = report["allocator_model"]
    out.update(live_peak=report["peak_bytes"], est_reserved=report.get("est_reserved_peak_bytes"),
               est_allocated=report.get("est_allocated_peak_bytes"), events=estimate.get("events"),
               model_error=estimate.get("error"), trace=report["alloc_trace"])
    return out
