"""The allocator model's bookkeeping: blocks, pools of cached blocks, expandable segments.

A ``Block`` is a piece of a segment, linked to its neighbours (``prev`` / ``next``) as torch's
``Block`` is; a ``Pool`` keeps the cached (free) mapped blocks ordered by (size, address), which is
``BlockComparatorSize``, so the first block at least as large as a request is the best fit, and the
unmapped ranges of expandable segments by address (``BlockComparatorAddress``). Pure Python.
"""
from __future__ import annotations

from bisect import bisect_left, insort


class Block:
    __slots__ = ("size", "ptr", "pool", "allocated", "prev", "next", "mapped", "segment", "gc_base", "requested")

    def __init__(self, size, ptr, pool, segment=None, mapped=True):
        self.size, self.ptr, self.pool, self.segment, self.mapped = size, ptr, pool, segment, mapped
        self.allocated, self.prev, self.next, self.gc_base, self.requested = False, None, None, 0, 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


class Segment:
    """An expandable segment of ``pool``: reserved address space mapped in pages of ``page`` bytes."""

    __slots__ = ("base", "size", "page", "pool")

    def __init__(self, base, size, page, pool):
        self.base, self.size, self.page, self.pool = base, size, page, pool


class Pool:
    """Cached blocks of one pool: mapped free blocks by (size, address), unmapped ranges by address."""

    def __init__(self, small: bool):
        self.small = small
        self.keys, self.blocks = [], {}          # [(size, ptr)] sorted, ptr -> Block
        self.unmapped, self.unmapped_at = [], {}  # [ptr] sorted, ptr -> Block
        self.calls = 0                          # get_free_blocks_call_count (garbage collection ages)

    def insert(self, block):
        """``insert_into_blocks``: cache a free mapped block (its age starts now)."""
        insort(self.keys, (block.size, block.ptr))
        self.blocks[block.ptr] = block
        block.gc_base = self.calls

    def remove(self, block):
        del self.keys[bisect_left(self.keys, (block.size, block.ptr))]
        del self.blocks[block.ptr]

    def insert_unmapped(self, block):
        insort(self.unmapped, block.ptr)
        self.unmapped_at[block.ptr] = block

    def remove_unmapped(self, block):
        del self.unmapped[bisect_left(self.unmapped, block.ptr)]
        del self.unmapped_at[block.ptr]

    def discard(self, block):
        (self.remove if block.mapped else self.remove_unmapped)(block)


def split_off(block, size, mapped=True) -> Block:
    """Cut ``block`` to ``size`` bytes; the rest becomes a new block after it (returned, not cached)."""
    rest = Block(block.size - size, block.ptr + size, block.pool, block.segment, mapped)
    rest.prev, rest.next = block, block.next
    if block.next is not None:
        block.next.prev = rest
    block.next, block.size = rest, size
    return rest


def try_merge(dst, src) -> int:
    """``try_merge_blocks``: absorb the free neighbour ``src`` (mapped alike) into ``dst``, which is
    in no pool; returns the bytes absorbed."""
    if src is None or src.allocated or src.mapped != dst.mapped:
        return 0
    src.pool.discard(src)
    if dst.prev is src:
        dst.ptr, dst.prev = src.ptr, src.prev
        if dst.prev is not None:
            dst.prev.next = dst
    else:
        dst.next = src.next
        if dst.next is not None:
            dst.next.prev = dst
    dst.size += src.size
    return src.size


def splice_free(like, ptr, size, prev, nxt) -> None:
    """A free mapped block of ``like``'s segment between ``prev`` and ``nxt``, cached in its pool."""
    block = Block(size, ptr, like.pool, like.segment)
    block.prev, block.next = prev, nxt
    if prev is not None:
        prev.next = block
    if nxt is not None:
        nxt.prev = block
    block.pool.insert(block)


def expandable_size(block) -> int:
    """The size a block can grow to: its own plus the unmapped range right after it."""
    nxt = block.next
    return block.size + (nxt.size if nxt is not None and not nxt.mapped else 0)
