"""The independent measurement the meter step compares the probe's CUDA meter with:
``python3 reference.py OUT.json PROBE_ARGS...`` runs the same cells as ``probes/ga_memory`` with those
arguments (the same model builder, loop and cell plumbing), in one process and in plan order as
``--isolate off`` does, but reads ``torch.cuda.max_memory_allocated`` itself: reset when the measured
window opens, read when it closes, nothing per phase. The probe's meter must give the same peak.
Without CUDA (the dry run) the cells run and no peak is read. Written after every cell (``partial``
until the last), with each cell's meter and the device torch ran the cells on (what the step's
``meter.reference_on_cuda`` check reads)."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROBES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "probes")
sys.path[:0] = [os.path.join(PROBES, "ga_memory"), PROBES]

import torch  # noqa: E402

import _cells  # noqa: E402
from _cli import make_spec, parser  # noqa: E402
from _meters.phases import DEVICE_METER  # noqa: E402


class WindowPeak:
    """The loop's meter interface, reading only the allocator's own peak counter over the window."""

    def __init__(self, device):
        self.kind, self.cuda = DEVICE_METER[device], device == "cuda"
        self.peak = self.end_bytes = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def track(self, tensors, site=None):
        pass

    def close(self):
        pass

    def reset_peak(self):
        self.end_bytes = None
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    def mark(self, name):
        if name is not None:
            return
        self.end_bytes = 0
        if self.cuda:
            torch.cuda.synchronize()
            self.peak, self.end_bytes = int(torch.cuda.max_memory_allocated()), int(torch.cuda.memory_allocated())

    def report(self):
        return {"peak_bytes": self.peak, "end_bytes": self.end_bytes, "phases": {}}


def _device(spec) -> dict:
    """What the cells ran on, as torch sees it (not only what was asked)."""
    if spec["device"] == "cuda" and torch.cuda.is_available():
        return {"type": "cuda", "name": torch.cuda.get_device_name(0), "requested": spec["device"]}
    return {"type": "cpu", "name": None, "requested": spec["device"]}


def _write(out, data) -> None:
    with open(f"{out}.tmp", "w") as fh:
        json.dump(data, fh, indent=1)
    os.replace(f"{out}.tmp", out)


def main(out, argv):
    """Each cell's peak to ``out`` after every cell (``partial`` until the last: a kill keeps the
    finished ones), with the meter each cell read and the device torch ran it on."""
    spec = make_spec(parser().parse_args(argv))
    _cells.make_meter = lambda spec: WindowPeak(spec["device"])
    todo = _cells.plan(spec)
    data = {"cells": {}, "errors": {}, "meters": {}, "device": _device(spec),
            "partial": {"done": 0, "planned": len(todo)}}
    _write(out, data)
    for cell in todo:
        record = _cells.run_cell(spec, cell)
        key = f"{cell['precision']}.ga{cell['ga']}.h{cell['hidden']}"
        data["cells"][key] = record.get("peak_bytes")
        if record.get("meter"):
            data["meters"][key] = record["meter"]
        if record.get("error"):
            data["errors"][key] = record["error"]
        data["partial"]["done"] += 1
        if data["partial"]["done"] == len(todo):
            del data["partial"]
        _write(out, data)
        print(f"[reference] {key}: {record.get('peak_bytes')} {record.get('error') or ''}", flush=True)
    return 0 if not data["errors"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
