"""A model of PyTorch's CUDA caching allocator on one stream, in pure Python (no torch import).

It follows ``DeviceCachingAllocator`` in ``c10/cuda/CUDACachingAllocator.cpp`` (quoted names are that
file's). ``malloc`` rounds the request (``round_size``), picks the small or large pool, takes the
smallest cached block that fits (``get_free_block``: best fit by (size, address); never an oversize
block for a smaller request), else opens a segment (``alloc_block``: 2 MiB, 20 MiB or the request
rounded up to 2 MiB); when ``cudaMalloc`` fails it frees oversize cached blocks
(``release_available_cached_blocks``), then every unsplit cached segment (``release_cached_blocks``),
and retries. The block is split when the rest is worth keeping (``should_split``: at least 512 B in the
small pool or with expandable segments; in the large pool more than 1 MiB, for requests below
``max_split_size``). ``free`` merges a block with its free neighbours (``free_block``);
``empty_cache`` returns the unsplit cached segments. With a memory fraction and a
``garbage_collection_threshold`` the oldest unsplit large cached blocks go back before a segment is
opened (``garbage_collect_cached_blocks``). Expandable segments: ``expandable``.

Addresses are the model's own: segments are laid out one after another, so among equal-size cached
blocks the older segment's wins the tie, where the real ``cudaMalloc`` may return any address.
"""
from __future__ import annotations

from bisect import bisect_left

from .blocks import Block, Pool, expandable_size, split_off, try_merge
from .conf import MIN_BLOCK, SMALL_BUFFER, SMALL_SIZE, AllocSettings, allocation_size, round_size
from .expandable import ExpandableSegments


class ModelOutOfMemory(MemoryError):
    """The modelled device could not hold a new segment, even after freeing the cache."""


class CachingAllocatorModel(ExpandableSegments):
    """Replays malloc / free / empty_cache and keeps torch's counters: ``reserved`` (segments, or
    mapped pages), ``allocated`` (block sizes, 512 B multiples), ``requested`` (bytes asked for),
    their peaks since ``reset_peak``, and ``segments`` (``cudaMalloc`` segments not yet freed)."""

    def __init__(self, settings: AllocSettings = AllocSettings()):
        self.settings = settings
        self.small, self.large = Pool(True), Pool(False)
        self.reserved = self.allocated = self.requested = self.segments = 0
        self.device_allocs = self.device_frees = 0   # cudaMalloc calls or page maps; cudaFree or unmaps
        self._allowed = settings.allowed_maximum
        self._gc = self._allowed is not None and settings.garbage_collection_threshold > 0
        self._split_max = settings.max_split_size if settings.max_split_size is not None else float("inf")
        self._next_address = 1 << 40
        self._expandable = []
        self.reset_peak()

    def reset_peak(self):
        """``reset_peak_memory_stats``: the peaks restart from the current values."""
        self.peak_reserved, self.peak_allocated, self.peak_requested = self.reserved, self.allocated, self.requested

    # --- malloc -------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> Block:
        """A block for a request of ``nbytes`` (> 0) bytes; ``ModelOutOfMemory`` when none can be had."""
        size = round_size(self.settings, nbytes)
        pool = self.small if size <= SMALL_SIZE else self.large
        block = self._get_free_block(pool, size)
        if block is None:
            if self._gc:
                self._garbage_collect()
            alloc = allocation_size(size)
            block = self._alloc_block(pool, size, alloc)
            if block is None and self._release_available(pool, size):
                block = self._alloc_block(pool, size, alloc)
            if block is None:
                self.empty_cache()
                block = self._alloc_block(pool, size, alloc)
            if block is None:
                raise ModelOutOfMemory(f"tried to allocate {alloc} B with {self.reserved} B reserved "
                                       f"({self.allocated} B allocated)")
        if self._should_split(block, size):
            pool.insert(split_off(block, size))
        block.allocated, block.requested = True, nbytes
        self.allocated += block.size
        self.requested += nbytes
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_requested = max(self.peak_requested, self.requested)
        return block

    def _get_free_block(self, pool, size):
        if self._gc:
            pool.calls += 1
        keys = pool.keys
        i = bisect_left(keys, (size, -1))
        if i == len(keys):
            return None
        block = pool.blocks[keys[i][1]]
        while block.segment is not None and i + 1 < len(keys):  # expandable: by the size it can grow to
            nxt = pool.blocks[keys[i + 1][1]]
            if expandable_size(nxt) >= expandable_size(block):
                break
            i, block = i + 1, nxt
        if size < self._split_max <= block.size:
            return None  # an oversize block is not returned for a smaller request
        if size >= self._split_max and block.size >= size + self.settings.max_non_split_rounding:
            return None  # nor rounded up by more than max_non_split_rounding
        pool.remove(block)
        return block

    def _should_split(self, block, size) -> bool:
        remaining = block.size - size
        if block.pool.small or self.settings.expandable_segments:
            return remaining >= MIN_BLOCK
        return size < self._split_max and remaining > SMALL_SIZE

    def _alloc_block(self, pool, size, alloc):
        if self._allowed is not None and self.reserved + alloc > self._allowed:
            return None
        if self.settings.expandable_segments:
            return self._expandable_block(pool, size)
        total = self.settings.device_total
        if total is not None and self.reserved + alloc > total:
            return None  # cudaMalloc fails
        self.segments += 1
        self._grow(alloc)
        return Block(alloc, self._address(alloc), pool)

    def _address(self, size) -> int:
        ptr = self._next_address
        self._next_address += -(-size // SMALL_BUFFER) * SMALL_BUFFER
        return ptr

    def _grow(self, nbytes):
        self.device_allocs += 1
        self.reserved += nbytes
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    # --- free and release ---------------------------------------------------------------
    def free(self, block: Block) -> None:
        """``free`` / ``free_block``: back to its pool, merged with its free neighbours."""
        if not block.allocated:
            raise ValueError("a block freed twice")
        block.allocated = False
        self.allocated -= block.size
        self.requested -= block.requested
        try_merge(block, block.prev)
        try_merge(block, block.next)
        block.pool.insert(block)

    def empty_cache(self) -> None:
        """``release_cached_blocks``: return every unsplit cached segment (unmap expandable pages)."""
        for pool in (self.large, self.small):
            unmap = []
            for _, ptr in list(pool.keys):
                block = pool.blocks[ptr]
                if block.segment is not None:
                    unmap.append(block)
                elif not block.is_split():
                    self._release_block(block)
            for block in unmap:
                self._unmap(block)

    def _release_block(self, block):
        """``release_block``: ``cudaFree`` an unsplit cached segment."""
        block.pool.remove(block)
        self.segments -= 1
        self.device_frees += 1
        self.reserved -= block.size

    def _release_available(self, pool, size) -> bool:
        """``release_available_cached_blocks``: free oversize cached blocks, only enough for ``size``
        (with expandable segments torch would reach an internal assert here; the model frees nothing)."""
        split_max = self.settings.max_split_size
        if split_max is None or self.settings.expandable_segments:
            return False
        key = max(size, split_max)
        keys = pool.keys
        i = bisect_left(keys, (key, -1))
        if i < len(keys):
            self._release_block(pool.blocks[keys[i][1]])
            return True
        released = 0
        for _, ptr in reversed(list(keys)):  # no single block is large enough: the largest first
            if released >= key or pool.blocks[ptr].size < split_max:
                break
            released += pool.blocks[ptr].size
            self._release_block(pool.blocks[ptr])
        return released >= key

    def _garbage_collect(self):
        """``garbage_collect_cached_blocks``: above threshold x allowed bytes, return the unsplit large
        cached blocks at least as old as their average age (pool searches since each was cached),
        round after round, until the excess is reclaimed or nothing more goes."""
        threshold = int(self.settings.garbage_collection_threshold * self._allowed)
        if self.reserved <= threshold:
            return
        target, reclaimed, pool = self.reserved - threshold, 0, self.large
        ages = {ptr: pool.calls - b.gc_base for ptr, b in pool.blocks.items() if not b.is_split()}
        total, freed = sum(ages.values()), True
        while reclaimed < target and freed and ages:
            average, freed = total / len(ages), False
            for _, ptr in list(pool.keys):
                if ptr in ages and ages[ptr] >= average:
                    freed = True
                    reclaimed += pool.blocks[ptr].size
                    total -= ages.pop(ptr)
                    self._release_block(pool.blocks[ptr])

    # --- views --------------------------------------------------------------------------
    def largest_free_block(self) -> int:
        """The largest cached (free, mapped) block."""
        return max((pool.keys[-1][0] for pool in (self.small, self.large) if pool.keys), default=0)

    def segment_count(self) -> int:
        """Segments as ``memory_snapshot`` lists them: ``cudaMalloc`` segments and mapped ranges."""
        return self.segments + self._mapped_ranges()
