"""Replay an allocation trace through the allocator model: what the CUDA caching allocator would have
reserved for the same allocations and frees, in the measured step's window.

``replay(trace, settings)`` returns the window's estimated peaks (``est_reserved_peak_bytes``: the
segments the allocator holds; ``est_allocated_peak_bytes``: block sizes, in 512 B multiples;
``requested_peak_bytes``: the bytes asked for, which equals the CPU meter's live-bytes peak but where
a storage is resized in place, as the copy holds the old and the new block) and
the moment of the reserved peak at which most of it was allocated: its phase (``peak_phase``; None
when that is the window's start) and ``at_peak`` the allocated bytes, the segments, the largest cached
block and the fragmentation (the share of reserved bytes not allocated); or an ``error`` (a truncated or malformed trace, the modelled device out of memory). Pure Python.
"""
from __future__ import annotations

from .conf import AllocSettings
from .model import CachingAllocatorModel, ModelOutOfMemory
from .trace import Trace, TraceError, TraceRecorder


def _at_peak(model) -> dict:
    reserved = model.reserved
    return {"reserved_bytes": reserved, "allocated_bytes": model.allocated,
            "segments": model.segment_count(), "largest_free_block_bytes": model.largest_free_block(),
            "fragmentation": round(1.0 - model.allocated / reserved, 6) if reserved else 0.0}


def _run(trace: Trace, model) -> dict:
    events, (start, _), end = trace.events, trace.window, trace.window_end
    marks = iter(list(trace.phases) + [(end + 1, None)])
    next_mark, next_name = next(marks)
    live, allocs, phase = {}, 0, None
    best, peak_phase, at_peak = (-1, -1), None, None
    for i, event in enumerate(events[:end]):
        if i == start:
            model.reset_peak()
            best, at_peak = (model.reserved, model.allocated), _at_peak(model)
        while i == next_mark:
            phase = next_name
            next_mark, next_name = next(marks)
        if event > 0:
            live[allocs] = model.malloc(event)
            allocs += 1
            if i >= start and (model.reserved, model.allocated) > best:  # the reserved peak, at its fullest
                best, peak_phase, at_peak = (model.reserved, model.allocated), phase, _at_peak(model)
        elif event < 0:
            block = live.pop(-event - 1, None)
            if block is None:
                raise TraceError(f"event {i} frees allocation {-event - 1}, which is not live")
            model.free(block)
        else:
            model.empty_cache()
    if start >= end:  # an empty window: the state it opened with
        model.reset_peak()
        at_peak = _at_peak(model)
    return {"est_reserved_peak_bytes": model.peak_reserved, "est_allocated_peak_bytes": model.peak_allocated,
            "requested_peak_bytes": model.peak_requested, "peak_phase": peak_phase, "at_peak": at_peak,
            "end_reserved_bytes": model.reserved, "device_allocs": model.device_allocs,
            "device_frees": model.device_frees, "events": end}


def replay(trace: Trace, settings: AllocSettings = AllocSettings()) -> dict:
    """The window's estimates, or ``{"error": ...}``; never raises for a bad trace or an OOM."""
    if trace.truncated:
        return {"error": f"allocation trace truncated at {len(trace.events)} events: no estimate"}
    model = CachingAllocatorModel(settings)
    try:
        return _run(trace, model)
    except TraceError as exc:
        return {"error": f"allocation trace: {exc}"}
    except ModelOutOfMemory as exc:
        return {"error": f"estimated CUDA out of memory: {exc}"}


class AllocatorEstimate(TraceRecorder):
    """The CPU meter's observer of allocations (``_meters.cpu.StorageMeter(allocations=...)``): records the
    cell's allocation trace as the meter sees it, and at the end replays it through the model with
    ``settings``: ``report()`` gives the cell's ``est_reserved_peak_bytes``, ``est_allocated_peak_bytes`` and
    ``allocator_model`` (with ``keep_trace``, the trace itself too, as ``alloc_trace``)."""

    def __init__(self, settings: AllocSettings, keep_trace: bool = False):
        super().__init__()
        self.settings, self.keep_trace = settings, keep_trace

    def report(self) -> dict:
        trace = self.trace()
        model = replay(trace, self.settings)
        out = {k: model.pop(k) for k in ("est_reserved_peak_bytes", "est_allocated_peak_bytes") if k in model}
        out["allocator_model"] = {"settings": self.settings.describe(), **model}
        if self.keep_trace:
            out["alloc_trace"] = trace.to_json()
        return out
