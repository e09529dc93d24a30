"""Expandable segments in the allocator model (``expandable_segments:True``).

Each pool gets one segment of reserved address space (the device's memory plus an eighth, as torch
reserves) whose pages, 2 MiB in the small pool and 20 MiB in the large one, are mapped when a request
needs them: ``try_allocate_expandable_block`` takes the lowest address where free and unmapped space
together hold the request (``find_expandable_block``) and maps the missing pages (``map_block``);
``empty_cache`` unmaps the whole pages inside every free mapped block (``unmap_block``) and drops a
segment with nothing mapped (``release_expandable_segment``). Reserved bytes are the mapped pages.
"""
from __future__ import annotations

from .blocks import Block, Segment, split_off, splice_free, try_merge
from .conf import LARGE_BUFFER, SMALL_BUFFER

EXPANDABLE_SPAN = 1 << 46   # address space of an expandable segment when the device's memory is not given


class ExpandableSegments:
    """The expandable-segment half of ``CachingAllocatorModel`` (which supplies ``settings``,
    ``reserved``, ``_address`` and ``_grow``)."""

    def _expandable_block(self, pool, size):
        """``try_allocate_expandable_block``: map pages at the lowest address with room for ``size``."""
        candidate = self._find_expandable(pool, size)
        if not candidate.mapped and not self._map(candidate, min(candidate.size, size)):
            return None
        while candidate.size < size:
            nxt = candidate.next
            if not self._map(nxt, min(size - candidate.size, nxt.size)):
                return None
            candidate = nxt
        pool.remove(candidate)
        return candidate

    def _find_expandable(self, pool, size):
        """``find_expandable_block``: the first unmapped range (or the free block before it) from
        which free and unmapped blocks in a row hold ``size``; else a new segment."""
        for ptr in pool.unmapped:
            block = pool.unmapped_at[ptr]
            if block.prev is not None and not block.prev.allocated:
                block = block.prev
            room, b = 0, block
            while room < size and b is not None and not b.allocated:
                room, b = room + b.size, b.next
            if room >= size:
                return block
        page = SMALL_BUFFER if pool.small else LARGE_BUFFER
        total = self.settings.device_total
        span = -(-(total + total // 8) // page) * page if total else EXPANDABLE_SPAN
        segment = Segment(self._address(span), span, page, pool)
        self._expandable.append(segment)
        block = Block(span, segment.base, pool, segment, mapped=False)
        pool.insert_unmapped(block)
        return block

    def _map(self, block, size) -> bool:
        """``map_block``: back the first ``size`` bytes of an unmapped range with whole pages."""
        seg, pool = block.segment, block.pool
        offset = block.ptr - seg.base
        mapped = (-(-(offset + size) // seg.page) - offset // seg.page) * seg.page
        total = self.settings.device_total
        if mapped == 0 or (total is not None and self.reserved + mapped > total):
            return False  # cuMemCreate found no physical memory
        pool.remove_unmapped(block)
        block.mapped = True
        if mapped < block.size:
            pool.insert_unmapped(split_off(block, mapped, mapped=False))
        try_merge(block, block.prev)
        try_merge(block, block.next)
        pool.insert(block)
        self._grow(mapped)
        return True

    def _unmap(self, block):
        """``unmap_block``: return the whole pages inside a free mapped block."""
        seg, pool = block.segment, block.pool
        first = -(-(block.ptr - seg.base) // seg.page)
        last = (block.ptr + block.size - seg.base) // seg.page
        if first >= last:
            return
        pool.remove(block)
        start, length = seg.base + first * seg.page, (last - first) * seg.page
        if start > block.ptr:
            splice_free(block, block.ptr, start - block.ptr, block.prev, block)
        after = block.ptr + block.size - (start + length)
        if after > 0:
            splice_free(block, start + length, after, block, block.next)
        block.ptr, block.size, block.mapped = start, length, False
        try_merge(block, block.prev)
        try_merge(block, block.next)
        self.reserved -= length
        self.device_frees += 1
        if block.is_split():
            pool.insert_unmapped(block)
        else:  # ``release_expandable_segment``: nothing of it is mapped any more
            self._expandable.remove(seg)

    def _mapped_ranges(self) -> int:
        """Contiguous mapped ranges (``memory_snapshot`` lists each as a segment): each starts at
        its segment's base or right after an unmapped range."""
        ranges = sum(seg.base not in seg.pool.unmapped_at for seg in self._expandable)
        for pool in (self.small, self.large):
            ranges += sum(pool.unmapped_at[ptr].next is not None for ptr in pool.unmapped)
        return ranges
