"""The CUDA caching allocator model (probes/ga_memory/_allocator_model/), rule by rule.

Every table row cites the rule it checks, by the function of PyTorch's
``c10/cuda/CUDACachingAllocator.cpp`` (or ``c10/core/AllocatorConfig.cpp`` for the settings) that
states it; the expected bytes are worked out by hand from that rule. Pure Python: no torch.
"""
from __future__ import annotations

import os
import re
import sys

import pytest

PROBES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "probes")
sys.path[:0] = [os.path.join(PROBES, "ga_memory")]

from _allocator_model.conf import (AllocConfError, AllocSettings, allocation_size, next_division,  # noqa: E402
                         parse_alloc_conf, round_size)
from _allocator_model.replay import replay  # noqa: E402
from _allocator_model.trace import Trace  # noqa: E402
from _allocator_model.model import CachingAllocatorModel, ModelOutOfMemory  # noqa: E402

KIB, MIB = 1024, 1024 * 1024
DEFAULT = AllocSettings()


# --- sizes --------------------------------------------------------------------------------
@pytest.mark.parametrize("request_bytes, rounded, rule", [
    (1, 512, "round_size: below kMinBlockSize (512) a request takes 512 B"),
    (512, 512, "round_size: a multiple of 512 B stays"),
    (513, 1024, "round_size: else up to the next multiple of 512 B"),
    (MIB + 1, MIB + 512, "round_size: 512 B rounding holds for large requests too"),
])
def test_round_size(request_bytes, rounded, rule):
    assert round_size(DEFAULT, request_bytes) == rounded, rule


@pytest.mark.parametrize("conf, request_bytes, rounded, rule", [
    ("roundup_power2_divisions:4", MIB + 100 * KIB, MIB + 256 * KIB,
     "roundup_power2_next_division: 1..2 MiB in 4 divisions of 256 KiB"),
    ("roundup_power2_divisions:4", 2 * MIB, 2 * MIB, "roundup_power2_next_division: a power of two stays"),
    ("roundup_power2_divisions:4", 1500, 1536,
     "round_size: divisions apply only above kMinBlockSize x divisions (2048 B)"),
    ("roundup_power2_divisions:[1:4,>:0]", 4 * MIB + 1, 4 * MIB + 512,
     "parseRoundUpPower2Divisions: '>' sets the rest, from the last interval named (4 MiB gets 0)"),
    ("roundup_power2_divisions:[1:4,>:0]", MIB + 1, MIB + 512,
     "parseRoundUpPower2Divisions: '>' also overwrites the last named interval itself"),
    ("roundup_power2_divisions:[2:4,16:8]", MIB + 1, MIB + 256 * KIB,
     "parseRoundUpPower2Divisions: the first pair fills the intervals below it (1..2 MiB gets 4)"),
    ("roundup_power2_divisions:[2:4,16:8]", 16 * MIB + 1, 18 * MIB,
     "roundup_power2_divisions(size): the 16..32 MiB interval has 8 divisions of 2 MiB"),
    ("roundup_power2_divisions:[2:4,16:8]", 8 * MIB + 1, 8 * MIB + 512,
     "roundup_power2_divisions(size): an interval not named keeps 0, plain 512 B rounding"),
])
def test_roundup_power2_divisions(conf, request_bytes, rounded, rule):
    assert round_size(parse_alloc_conf(conf), request_bytes) == rounded, rule


def test_next_division_as_documented():
    # the comment above roundup_power2_next_division: 1200 in 4 divisions of 1024..2048 rounds to 1280
    assert next_division(1200, 4) == 1280


@pytest.mark.parametrize("size, segment, rule", [
    (512, 2 * MIB, "get_allocation_size: a small request (<= kSmallSize, 1 MiB) opens a 2 MiB segment"),
    (MIB, 2 * MIB, "get_allocation_size: 1 MiB is still small"),
    (MIB + 512, 20 * MIB, "get_allocation_size: below kMinLargeAlloc (10 MiB) a 20 MiB segment"),
    (10 * MIB, 10 * MIB, "get_allocation_size: from 10 MiB on, the request rounded to kRoundLarge (2 MiB)"),
    (11 * MIB + 512, 12 * MIB, "get_allocation_size: rounded up to 2 MiB"),
])
def test_allocation_size(size, segment, rule):
    assert allocation_size(size) == segment, rule


# --- one malloc at a time ------------------------------------------------------------------
def _model(conf="", **device):
    settings = parse_alloc_conf(conf)
    return CachingAllocatorModel(settings.with_device(**device) if device else settings)


@pytest.mark.parametrize("sizes, reserved, allocated, segments, rule", [
    ([100, 100], 2 * MIB, 1024, 1, "get_pool / should_split: two small requests share one 2 MiB segment"),
    ([MIB, MIB], 2 * MIB, 2 * MIB, 1, "should_split (small pool): the rest is split off when >= 512 B"),
    ([MIB, MIB - 512, 100], 2 * MIB, 2 * MIB, 1,
     "should_split (small pool): a rest of exactly 512 B is split off and serves the next request"),
    ([MIB + 512], 20 * MIB, MIB + 512, 1, "should_split (large): 20 MiB segment, rest > 1 MiB is split"),
    ([19 * MIB], 20 * MIB, 20 * MIB, 1,
     "should_split (large): a 19 MiB request rounds to a 20 MiB segment; 1 MiB left is not > kSmallSize, "
     "so the whole block is allocated"),
    ([MIB + 512, 9 * MIB], 20 * MIB, 10 * MIB + 512, 1,
     "get_free_block: the split-off rest of a 20 MiB segment serves the next large request"),
    ([100, MIB + 512], 22 * MIB, MIB + 1024, 2, "get_pool: small and large requests never share a segment"),
    ([30 * MIB, 30 * MIB], 60 * MIB, 60 * MIB, 2, "alloc_block: each large request past 10 MiB its own segment"),
])
def test_malloc_table(sizes, reserved, allocated, segments, rule):
    model = _model()
    for n in sizes:
        model.malloc(n)
    assert (model.reserved, model.allocated, model.segment_count()) == (reserved, allocated, segments), rule
    assert model.requested == sum(sizes)


def test_best_fit_takes_the_smallest_cached_block_that_fits():
    """get_free_block: lower_bound in the pool ordered by (size, address) is the best fit."""
    model = _model()
    a, b = model.malloc(12 * MIB), model.malloc(14 * MIB)
    model.free(a)
    model.free(b)
    c = model.malloc(13 * MIB)  # 12 MiB is too small: the 14 MiB block, not split (1 MiB rest)
    d = model.malloc(11 * MIB)  # the 12 MiB block; 1 MiB left is not > kSmallSize: unsplit
    assert (c.size, d.size) == (14 * MIB, 12 * MIB)
    assert model.reserved == 26 * MIB and model.allocated == 26 * MIB and model.segment_count() == 2


def test_free_merges_neighbours_and_empty_cache_returns_only_unsplit_segments():
    """free_block / try_merge_blocks merge free neighbours; release_cached_blocks frees only segments
    that are one unsplit block, so a segment with one live block stays reserved."""
    model = _model()
    a, b = model.malloc(2 * MIB), model.malloc(2 * MIB)  # one 20 MiB segment: a | b | 16 MiB rest
    model.free(a)
    model.empty_cache()
    assert model.reserved == 20 * MIB, "release_cached_blocks: a split segment is kept"
    model.free(b)  # b merges with a and with the rest: one 20 MiB block again
    assert model.largest_free_block() == 20 * MIB
    model.empty_cache()
    assert model.reserved == 0 and model.segment_count() == 0


@pytest.mark.parametrize("conf, first, second, reserved, second_block, rule", [
    ("max_split_size_mb:20", 40 * MIB, 5 * MIB, 60 * MIB, 5 * MIB,
     "get_free_block: an oversize cached block (>= max_split_size) is not returned for a smaller request"),
    ("max_split_size_mb:20", 40 * MIB, 30 * MIB, 40 * MIB, 40 * MIB,
     "get_free_block / should_split: a request >= max_split_size takes an oversize block within "
     "max_non_split_rounding (20 MiB), unsplit"),
    ("max_split_size_mb:20", 46 * MIB, 24 * MIB, 70 * MIB, 24 * MIB,
     "get_free_block: an oversize block 20 MiB or more above the request is not taken"),
    ("max_split_size_mb:20,max_non_split_rounding_mb:40", 46 * MIB, 24 * MIB, 46 * MIB, 46 * MIB,
     "parseMaxNonSplitRoundingSize: max_non_split_rounding_mb widens that limit"),
    ("", 40 * MIB, 5 * MIB, 40 * MIB, 5 * MIB,
     "should_split: without max_split_size a large cached block is split for a smaller request"),
])
def test_max_split_size(conf, first, second, reserved, second_block, rule):
    model = _model(conf)
    model.free(model.malloc(first))
    block = model.malloc(second)
    assert (model.reserved, block.size) == (reserved, second_block), rule


@pytest.mark.parametrize("conf, message", [
    ("max_split_size_mb:19", "max_split_size_mb too small, must be >= 20"),
    ("garbage_collection_threshold:1.0", "set it in (0.0, 1.0)"),
    ("expandable_segments:yes", "True/False"),
    ("roundup_power2_divisions:3", "power of 2"),
    ("backend:cudaMallocAsync", "not the caching allocator"),
    ("max_split_mb:20", "unrecognized CachingAllocator option: max_split_mb"),
    ("expandable_segments", "expected 'expandable_segments:VALUE'"),
])
def test_settings_torch_refuses_are_refused(conf, message):
    """parseArgs and its parse* helpers refuse these; so does the model, with their words."""
    with pytest.raises(AllocConfError, match=re.escape(message)):
        parse_alloc_conf(conf)


def test_settings_that_change_no_device_block_are_accepted():
    settings = parse_alloc_conf("backend:native, pinned_use_cuda_host_register:True,release_lock_on_cudamalloc:True")
    assert settings == DEFAULT


# --- out of memory, garbage collection ---------------------------------------------------
def test_failed_cudamalloc_frees_the_cache_and_retries():
    """malloc: when alloc_block fails, release_cached_blocks frees every unsplit cached segment and
    alloc_block is retried: ten cached small segments make room for a 30 MiB one on a 40 MiB device."""
    model = _model(device_total=40 * MIB)
    smalls = [model.malloc(MIB) for _ in range(20)]  # 10 segments of 2 MiB
    for block in smalls:
        model.free(block)
    assert model.reserved == 20 * MIB
    model.malloc(30 * MIB)
    assert model.reserved == 30 * MIB and model.segment_count() == 1


def test_failed_cudamalloc_frees_oversize_blocks_first():
    """release_available_cached_blocks: with max_split_size set, oversize cached blocks are freed, the
    largest first and only enough for the request, before the whole cache is: the 12 MiB one stays."""
    model = _model("max_split_size_mb:20", device_total=100 * MIB)
    blocks = [model.malloc(n) for n in (30 * MIB, 40 * MIB, 12 * MIB)]
    model.malloc(MIB)
    for block in blocks:
        model.free(block)
    assert model.reserved == 84 * MIB
    model.malloc(50 * MIB)  # 84 + 50 > 100: frees 40 (< 50), then 30 (70 >= 50); 12 and 2 stay
    assert model.reserved == 12 * MIB + 2 * MIB + 50 * MIB


def test_out_of_memory_when_nothing_can_be_freed():
    model = _model(device_total=40 * MIB)
    model.malloc(30 * MIB)
    with pytest.raises(ModelOutOfMemory):
        model.malloc(20 * MIB)


def test_memory_fraction_caps_like_set_per_process_memory_fraction():
    """alloc_block: with set_fraction, total + segment > allowed_memory_maximum fails the allocation."""
    model = _model(device_total=100 * MIB, memory_fraction=0.5)
    model.malloc(40 * MIB)
    with pytest.raises(ModelOutOfMemory):
        model.malloc(20 * MIB)


@pytest.mark.parametrize("conf, fraction, reserved, rule", [
    ("garbage_collection_threshold:0.5", 1.0, 90 * MIB,
     "garbage_collect_cached_blocks: above threshold x allowed (50 of 100 MiB) the unsplit large cached "
     "blocks at least as old as the average (ages 12, 2, 1) go before a segment is opened: only A"),
    ("", 1.0, 40 * MIB,
     "malloc: no garbage collection without the threshold; the failed alloc_block empties the whole cache"),
    ("garbage_collection_threshold:0.5", None, 40 * MIB,
     "malloc: garbage collection only with set_fraction; cudaMalloc fails on the full device instead"),
])
def test_garbage_collection(conf, fraction, reserved, rule):
    model = _model(conf, device_total=100 * MIB, memory_fraction=fraction)
    a, b, s = model.malloc(30 * MIB), model.malloc(30 * MIB), model.malloc(2 * MIB)
    model.free(s)
    model.free(a)
    for _ in range(10):  # large-pool searches answered by the 20 MiB segment (the best fit): A ages
        model.free(model.malloc(2 * MIB))
    model.free(b)
    model.free(model.malloc(2 * MIB))
    assert model.reserved == 80 * MIB  # A, B and the 20 MiB segment
    model.malloc(40 * MIB)
    assert model.reserved == reserved, rule


# --- expandable segments ------------------------------------------------------------------
@pytest.mark.parametrize("sizes, reserved, segments, rule", [
    ([3 * MIB, 30 * MIB], 40 * MIB, 1,
     "try_allocate_expandable_block: one large segment grows by 20 MiB pages (33 MiB -> 2 pages)"),
    ([100], 2 * MIB, 1, "ExpandableSegment: the small pool maps 2 MiB pages"),
    ([100, 3 * MIB], 22 * MIB, 2, "one expandable segment per pool"),
    ([19 * MIB, MIB + 512], 40 * MIB, 1,
     "should_split: with expandable segments any rest >= 512 B is split; the next request maps a page"),
])
def test_expandable_segments(sizes, reserved, segments, rule):
    model = _model("expandable_segments:True")
    for n in sizes:
        model.malloc(n)
    assert (model.reserved, model.segment_count()) == (reserved, segments), rule


def test_expandable_empty_cache_unmaps_whole_free_pages_only():
    """unmap_block: only whole pages inside a free block are unmapped; a page shared with a live block stays."""
    model = _model("expandable_segments:True")
    a = model.malloc(25 * MIB)  # pages 0-1 (40 MiB): a = [0, 25), free [25, 40)
    b = model.malloc(15 * MIB)  # the free [25, 40) exactly
    model.free(a)               # free [0, 25): page 0 is whole, page 1 holds b too
    model.empty_cache()
    assert model.reserved == 20 * MIB and model.segment_count() == 1
    model.free(b)
    model.empty_cache()
    assert model.reserved == 0 and model.segment_count() == 0


def test_expandable_reuses_unmapped_address_space_after_empty_cache():
    """find_expandable_block: the lowest address with room (free + unmapped) is mapped again."""
    model = _model("expandable_segments:True")
    a, b = model.malloc(20 * MIB), model.malloc(20 * MIB)
    model.free(a)
    model.empty_cache()  # page 0 unmapped, page 1 (b) mapped
    assert model.reserved == 20 * MIB and model.segment_count() == 1
    model.malloc(20 * MIB)  # maps page 0 again, beside b: one contiguous range
    assert model.reserved == 40 * MIB and model.segment_count() == 1
    del b


# --- replay -------------------------------------------------------------------------------
def test_replay_reads_the_window_after_the_warm_up_cache():
    """reset_peak_memory_stats at the window: the peak starts from what the warm-up left reserved."""
    events = [30 * MIB, -1, MIB + 512, 9 * MIB, -2, -3]  # warm-up: 30 MiB, freed; window: 1 MiB + 9 MiB
    out = replay(Trace(events, window=(2, 6), phases=[(2, "m0.forward"), (4, "m0.backward")]))
    assert out["est_reserved_peak_bytes"] == 30 * MIB  # the cached 30 MiB segment serves both
    assert out["est_allocated_peak_bytes"] == 10 * MIB + 512
    assert out["requested_peak_bytes"] == 10 * MIB + 512
    assert out["peak_phase"] == "m0.forward" and out["at_peak"]["segments"] == 1
    assert out["at_peak"]["fragmentation"] == pytest.approx(1 - (10 * MIB + 512) / (30 * MIB), abs=1e-6)


def test_replay_empty_cache_event_and_errors():
    events = [30 * MIB, -1, 0, 5 * MIB]
    assert replay(Trace(events, window=(3, 4)))["est_reserved_peak_bytes"] == 20 * MIB
    assert "not live" in replay(Trace([MIB, -2]))["error"]
    assert "truncated" in replay(Trace([MIB], truncated=True))["error"]
    oom = replay(Trace([30 * MIB, 30 * MIB]), DEFAULT.with_device(device_total=40 * MIB))
    assert oom["error"].startswith("estimated CUDA out of memory")


@pytest.mark.parametrize("data, message", [
    ({"events": [1]}, "format"),
    ({"format": "alloc-trace/1", "events": [1, "x"]}, "integers"),
    ({"format": "alloc-trace/1", "events": [1], "window": [0, 5]}, "window"),
    ({"format": "alloc-trace/1", "events": [1, 2], "window": [0, 2], "phases": [[1, "b"], [0, "a"]]}, "in order"),
])
def test_trace_json_is_checked(data, message):
    from _allocator_model.trace import TraceError

    with pytest.raises(TraceError, match=message):
        Trace.from_json(data)
