"""Wall-clock split of one probe run (``--timings``): where does a probe's time go?

Parts: interpreter start (process creation to the script's first line; from /proc on Linux,
10 ms resolution), imports of the ML stack, model builds, per-cell setup (loop, optimizer,
meter), steps (warm-up + measured, metered), cell subprocesses (isolated mode), and the rest.
"""
from __future__ import annotations

import os
import time


def process_start_epoch():
    """When this process started (epoch seconds), or None where /proc is unavailable."""
    try:
        with open("/proc/self/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        now = time.time()
        started_after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return now - (uptime - started_after_boot)
    except (OSError, ValueError, IndexError):
        return None


class Timings:
    """Accumulates named durations since the script's first line."""

    def __init__(self, script_start_epoch: float, script_start_perf: float):
        self.script_start_epoch = script_start_epoch
        self.script_start_perf = script_start_perf
        self.parts = {}

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to part ``name``."""
        self.parts[name] = self.parts.get(name, 0.0) + seconds

    def add_cells(self, cells) -> None:
        """Fold the cells' own ``seconds`` (build/setup/steps/process) into the parts."""
        names = {"build": "model_build_s", "setup": "cell_setup_s", "steps": "steps_s",
                 "failed": "failed_cells_s", "process": "cell_processes_s"}
        for cell in cells:
            for key, value in cell.get("seconds", {}).items():
                self.add(names.get(key, key + "_s"), value)

    def report(self) -> dict:
        """The split, rounded to ms, with ``script_total_s`` and the unaccounted ``other_s``."""
        total = time.perf_counter() - self.script_start_perf
        out = {k: round(v, 3) for k, v in self.parts.items()}
        inner = sum(v for k, v in self.parts.items() if k != "cell_processes_s")
        if "cell_processes_s" in self.parts:  # isolated: children's build/steps run inside it
            inner = sum(v for k, v in self.parts.items() if k in ("imports_s", "cell_processes_s"))
        out["other_s"] = round(max(0.0, total - inner), 3)
        out["script_total_s"] = round(total, 3)
        out["script_start_epoch"] = self.script_start_epoch
        started = process_start_epoch()
        if started is not None:
            out["interpreter_start_s"] = round(max(0.0, self.script_start_epoch - started), 3)
        return out
