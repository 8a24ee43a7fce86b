"""The shared pool of KV block ids, with the prefix-cache index over them.

Every hosted model allocates from this one pool; a block id means the same bytes for every model
(see ``engine.worker.kv_cache`` for the memory layout). A block is in exactly one of three states::

    in use       ref_count > 0                 not in the free queue
    cached free  ref_count == 0, has a hash    in the free queue AND in the hash index
    plain free   ref_count == 0, no hash       in the free queue

The free queue is LRU: ``allocate`` pops from the front, ``free`` appends at the back. A cached
free block stays findable by its hash until it is popped for reuse (evicted); a hit on it takes
it out of the queue again. Plain Python: no torch here.
"""

from __future__ import annotations

from collections import OrderedDict

from engine.errors import EngineError

__all__ = ["BlockPool"]


class BlockPool:
    """Ref-counted block ids, an LRU free queue and a hash -> block index."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise EngineError("the KV pool needs at least one block")
        self.num_blocks = num_blocks
        self._ref_counts = [0] * num_blocks
        self._hashes: list[bytes | None] = [None] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._cached: dict[bytes, int] = {}

    @property
    def num_free_blocks(self) -> int:
        """Blocks allocatable now (plain free plus cached free)."""
        return len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks findable by hash (in use or cached free)."""
        return len(self._cached)

    def free_block_ids(self) -> list[int]:
        """The free queue, front (next to be allocated) first."""
        return list(self._free)

    def ref_count(self, block_id: int) -> int:
        return self._ref_counts[block_id]

    def block_hash(self, block_id: int) -> bytes | None:
        return self._hashes[block_id]

    def lookup(self, block_hash: bytes) -> int | None:
        """The block holding this hash, if it is still cached."""
        return self._cached.get(block_hash)

    def is_free(self, block_id: int) -> bool:
        return block_id in self._free

    def allocate(self, num_blocks: int) -> list[int]:
        """Pop ``num_blocks`` from the front of the free queue, evicting their cached hashes."""
        if num_blocks > len(self._free):
            raise EngineError(f"KV pool exhausted: want {num_blocks}, have {len(self._free)}")
        block_ids = []
        for _ in range(num_blocks):
            block_id, _ = self._free.popitem(last=False)
            self._evict(block_id)
            self._ref_counts[block_id] = 1
            block_ids.append(block_id)
        return block_ids

    def touch(self, block_ids: list[int]) -> None:
        """Take one more reference on blocks found by hash (reviving cached free ones)."""
        for block_id in block_ids:
            if self._ref_counts[block_id] == 0:
                del self._free[block_id]
            self._ref_counts[block_id] += 1

    def free(self, block_ids: list[int]) -> None:
        """Drop one reference on each block; blocks reaching zero join the back of the queue in
        the order given (callers pass a sequence's blocks tail first, so tails evict first)."""
        for block_id in block_ids:
            if self._ref_counts[block_id] <= 0:
                raise EngineError(f"block {block_id} freed more often than allocated")
            self._ref_counts[block_id] -= 1
            if self._ref_counts[block_id] == 0:
                self._free[block_id] = None

    def cache(self, block_id: int, block_hash: bytes) -> None:
        """Index a full, computed block by its hash. A hash already held by another block keeps
        that block (two sequences computed the same prefix at once); this one stays unindexed."""
        if self._hashes[block_id] is not None or block_hash in self._cached:
            return
        self._hashes[block_id] = block_hash
        self._cached[block_hash] = block_id

    def reset_cache(self) -> int:
        """Forget every cached free block (e.g. after weights change); returns how many."""
        dropped = 0
        for block_id in self._free:
            if self._hashes[block_id] is not None:
                self._evict(block_id)
                dropped += 1
        return dropped

    def _evict(self, block_id: int) -> None:
        block_hash = self._hashes[block_id]
        if block_hash is not None:
            del self._cached[block_hash]
            self._hashes[block_id] = None
