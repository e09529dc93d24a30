"""Properties of the CUDA caching allocator model over random traces and settings (hypothesis).

After every malloc, free and empty_cache: reserved >= allocated >= requested, allocated in 512 B
blocks, the blocks tile their segments with no two free neighbours unmerged, and the mapped blocks
add up to reserved; freeing everything keeps reserved until ``empty_cache``, which returns all of
it. Replays are deterministic, and the settings' text reads back to the same settings. Pure Python.
"""
from __future__ import annotations

import os
import sys

from hypothesis import given, settings, strategies as st

PROBES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "probes")
sys.path[:0] = [os.path.join(PROBES, "ga_memory")]

from _allocator_model.conf import INTERVALS, AllocSettings, parse_alloc_conf  # noqa: E402
from _allocator_model.replay import replay  # noqa: E402
from _allocator_model.trace import Trace  # noqa: E402
from _allocator_model.model import CachingAllocatorModel, ModelOutOfMemory  # noqa: E402

MIB = 1024 * 1024
SIZES = st.one_of(st.integers(1, 4096), st.integers(4096, 2 * MIB), st.integers(MIB, 30 * MIB),
                  st.integers(10 * MIB, 300 * MIB))
OPS = st.lists(st.one_of(st.tuples(st.just("alloc"), SIZES), st.tuples(st.just("free"), st.integers(0, 10 ** 6)),
                         st.tuples(st.just("empty"), st.just(0))), max_size=120)
SETTINGS = st.builds(
    AllocSettings,
    max_split_size=st.one_of(st.none(), st.integers(20, 400).map(lambda mb: mb * MIB)),
    max_non_split_rounding=st.integers(20, 100).map(lambda mb: mb * MIB),
    expandable_segments=st.booleans(),
    roundup_power2_divisions=st.one_of(st.just((0,) * INTERVALS),
                                       st.lists(st.sampled_from([0, 1, 2, 4, 8, 16]), min_size=INTERVALS,
                                                max_size=INTERVALS).map(tuple)),
)


def _all_blocks(model, live):
    blocks = {id(b): b for b in live}
    for pool in (model.small, model.large):
        blocks.update((id(b), b) for b in pool.blocks.values())
        blocks.update((id(b), b) for b in pool.unmapped_at.values())
    return list(blocks.values())


def _check(model, live):
    assert model.reserved >= model.allocated >= model.requested >= 0
    assert model.allocated % 512 == 0
    assert model.requested == sum(b.requested for b in live)
    assert model.allocated == sum(b.size for b in live)
    assert model.peak_reserved >= model.reserved and model.peak_allocated >= model.allocated
    blocks = _all_blocks(model, live)
    assert sum(b.size for b in blocks if b.mapped) == model.reserved
    for b in blocks:
        if b.next is not None:
            assert b.next.prev is b and b.ptr + b.size == b.next.ptr
            if not b.allocated and not b.next.allocated:
                assert b.mapped != b.next.mapped, "two free neighbours left unmerged"
        if b.prev is not None:
            assert b.prev.next is b
        if not b.allocated and b.mapped:
            assert b.pool.blocks[b.ptr] is b
    for pool in (model.small, model.large):
        assert pool.keys == sorted((b.size, b.ptr) for b in pool.blocks.values())
        assert all(b.size <= 1024 * 1024 * 2 or not pool.small for b in pool.blocks.values() if b.segment is None)


def _run(model, ops):
    live = []
    for op, arg in ops:
        if op == "alloc":
            try:
                live.append(model.malloc(arg))
            except ModelOutOfMemory:
                pass
        elif op == "free" and live:
            model.free(live.pop(arg % len(live)))
        elif op == "empty":
            model.empty_cache()
        _check(model, live)
    return live


@settings(max_examples=150, deadline=None)
@given(SETTINGS, OPS)
def test_invariants_hold_after_every_event(alloc_settings, ops):
    model = CachingAllocatorModel(alloc_settings)
    _run(model, ops)
    assert model.peak_reserved >= model.peak_allocated >= model.peak_requested


@settings(max_examples=100, deadline=None)
@given(SETTINGS, OPS, st.integers(50, 600), st.one_of(st.none(), st.floats(0.3, 1.0)),
       st.sampled_from([0.0, 0.3, 0.8]))
def test_a_full_device_or_fraction_is_never_exceeded(alloc_settings, ops, device_mib, fraction, threshold):
    """alloc_block refuses a segment past allowed_memory_maximum (the fraction) or the device
    (cudaMalloc fails); the frees and retries on the way (garbage collection, releasing cached blocks)
    leave the model consistent, and an allocation the model refuses is ModelOutOfMemory. With
    expandable segments the fraction is checked against the request before its pages are mapped, so
    torch (and the model) may pass it by less than one 20 MiB page; the device itself, never."""
    alloc_settings = AllocSettings(**{**alloc_settings.__dict__, "garbage_collection_threshold": threshold})
    alloc_settings = alloc_settings.with_device(device_mib * MIB, fraction)
    model = CachingAllocatorModel(alloc_settings)
    _run(model, ops)
    allowed = alloc_settings.allowed_maximum
    assert model.peak_reserved <= alloc_settings.device_total
    if allowed is not None:
        assert model.peak_reserved < allowed + (20 * MIB if alloc_settings.expandable_segments else 1)


@settings(max_examples=100, deadline=None)
@given(SETTINGS, OPS)
def test_freeing_everything_keeps_reserved_until_empty_cache(alloc_settings, ops):
    model = CachingAllocatorModel(alloc_settings)
    live = _run(model, ops)
    reserved = model.reserved
    for block in live:
        model.free(block)
    _check(model, [])
    assert model.allocated == model.requested == 0
    assert model.reserved == reserved, "frees return blocks to the cache, never to the device"
    model.empty_cache()
    assert model.reserved == 0 and model.segment_count() == 0
    assert not model.small.keys and not model.large.keys and not model._expandable


@settings(max_examples=60, deadline=None)
@given(SETTINGS, OPS)
def test_replay_is_deterministic_and_agrees_with_the_model(alloc_settings, ops):
    events, live = [], []
    allocs = 0
    for op, arg in ops:
        if op == "alloc":
            events.append(arg)
            live.append(allocs)
            allocs += 1
        elif op == "free" and live:
            events.append(-(live.pop(arg % len(live)) + 1))
        elif op == "empty":
            events.append(0)
    trace = Trace(events, window=(len(events) // 2, len(events)))
    first, second = replay(trace, alloc_settings), replay(trace, alloc_settings)
    assert first == second
    assert first["est_reserved_peak_bytes"] >= first["est_allocated_peak_bytes"] >= first["requested_peak_bytes"]
    at = first["at_peak"]
    assert at["reserved_bytes"] == first["est_reserved_peak_bytes"] and 0.0 <= at["fragmentation"] <= 1.0


@settings(max_examples=100, deadline=None)
@given(SETTINGS, st.floats(0.01, 0.99))
def test_settings_text_reads_back(alloc_settings, threshold):
    for candidate in (alloc_settings, AllocSettings(garbage_collection_threshold=round(threshold, 3))):
        assert parse_alloc_conf(candidate.conf()) == candidate
