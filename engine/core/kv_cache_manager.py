"""Which KV blocks each sequence holds, and which of its prefix is already in the cache.

A full block is named by a hash chain that starts from the model and the tenant::

    root     = H("strongroom-kv" | model | tenant salt)
    hash[0]  = H(root    | tokens[0:B])
    hash[i]  = H(hash[i-1] | tokens[i*B:(i+1)*B])

so a block matches only for the same model, the same tenant and the same whole prefix. The salt
keeps one tenant from learning by timing whether another tenant sent a prompt. Only full blocks
whose KV has been computed are indexed; a hit never covers the last prompt token, whose logits
the step must compute. Plain Python: no torch here.
"""

from __future__ import annotations

import hashlib
from array import array

from engine.core.block_pool import BlockPool
from engine.core.sequence import Sequence

__all__ = ["BlockRelease", "KVCacheManager"]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    """Hands a shared ``BlockPool``'s blocks to sequences of any hosted model."""

    def __init__(self, pool: BlockPool, block_size: int, *, enable_prefix_caching: bool = True) -> None:
        self.pool = pool
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.num_cache_hit_tokens = 0
        self.num_cache_query_tokens = 0

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def num_blocks_for(self, num_tokens: int) -> int:
        return _cdiv(num_tokens, self.block_size)

    def find_cached_prefix(self, seq: Sequence) -> list[int]:
        """Block ids caching the longest computed prefix of a sequence that holds no blocks yet.
        Takes no reference; pass the result to ``allocate``."""
        if not self.enable_prefix_caching or seq.block_ids:
            return []
        max_blocks = (seq.num_tokens - 1) // self.block_size
        hits: list[int] = []
        for block_hash in self._block_hashes(seq, max_blocks):
            block_id = self.pool.lookup(block_hash)
            if block_id is None:
                break
            hits.append(block_id)
        return hits

    def can_allocate(self, seq: Sequence, num_new_tokens: int, cached: list[int] | None = None) -> bool:
        return self.num_blocks_short(seq, num_new_tokens, cached or []) <= 0

    def num_blocks_short(self, seq: Sequence, num_new_tokens: int, cached: list[int]) -> int:
        """How many blocks the pool lacks for ``allocate(seq, num_new_tokens, cached)`` (<= 0: none).
        A cached block that sits free counts once: reviving it takes it off the free queue."""
        held = len(seq.block_ids) + len(cached)
        computed = seq.num_computed_tokens + len(cached) * self.block_size
        need = self.num_blocks_for(computed + num_new_tokens) - held
        revived = sum(1 for b in cached if self.pool.is_free(b))
        return need - (self.pool.num_free_blocks - revived)

    def release(self, keep: list[int]) -> BlockRelease:
        """A tally of the blocks that preempting sequences would return to the pool, leaving out
        ``keep`` (a waiter's cached prefix: freeing those only turns its hit into a revival)."""
        return BlockRelease(self.pool, keep)

    def allocate(self, seq: Sequence, num_new_tokens: int, cached: list[int] | None = None) -> bool:
        """Give ``seq`` blocks for ``num_new_tokens`` more tokens after its computed ones (and after
        the ``cached`` prefix, which then counts as computed). False, changing nothing, when the
        pool is short."""
        if not cached and seq.block_ids:
            # A running sequence's next tokens (every decode step): usually no new block at all.
            short = seq.num_computed_tokens + num_new_tokens - len(seq.block_ids) * self.block_size
            if short <= 0:
                return True
            need = _cdiv(short, self.block_size)
            if need > self.pool.num_free_blocks:
                return False
            seq.block_ids.extend(self.pool.allocate(need))
            return True
        cached = cached or []
        if self.num_blocks_short(seq, num_new_tokens, cached) > 0:
            return False
        if not seq.block_ids:
            seq.num_cached_tokens = len(cached) * self.block_size
            self.num_cache_query_tokens += seq.num_tokens
            self.num_cache_hit_tokens += seq.num_cached_tokens
        if cached:
            self.pool.touch(cached)
            seq.block_ids = list(cached)
            seq.num_computed_tokens = len(cached) * self.block_size
            seq.num_indexed_blocks = 0
        need = self.num_blocks_for(seq.num_computed_tokens + num_new_tokens) - len(seq.block_ids)
        if need > 0:
            seq.block_ids.extend(self.pool.allocate(need))
        return True

    def commit(self, seq: Sequence) -> None:
        """Index the sequence's full blocks whose KV is now computed."""
        if not self.enable_prefix_caching:
            return
        num_full = min(seq.num_computed_tokens // self.block_size, len(seq.block_ids))
        # Only blocks that filled since the last call: a decode step fills one every block_size
        # steps, and re-offering a sequence's every block each step cost O(blocks) per step.
        if num_full <= seq.num_indexed_blocks:
            return
        hashes = self._extend_hashes(seq, num_full)
        for i in range(seq.num_indexed_blocks, num_full):
            self.pool.cache(seq.block_ids[i], hashes[i])
        seq.num_indexed_blocks = num_full

    def free(self, seq: Sequence) -> None:
        """Return the sequence's blocks, tail first so that tails are evicted before heads."""
        self.pool.free(seq.block_ids[::-1])
        seq.block_ids = []
        seq.num_indexed_blocks = 0

    def _block_hashes(self, seq: Sequence, num_blocks: int) -> list[bytes]:
        """The first ``num_blocks`` full-block hashes of ``seq``, computing missing ones."""
        return self._extend_hashes(seq, num_blocks)[:num_blocks]

    def _extend_hashes(self, seq: Sequence, num_blocks: int) -> list[bytes]:
        """``seq.block_hashes``, computed up to at least ``num_blocks`` entries."""
        hashes = seq.block_hashes
        size = self.block_size
        while len(hashes) < num_blocks:
            i = len(hashes)
            parent = hashes[-1] if hashes else self._root(seq)
            tokens = array("q", seq.token_ids[i * size : (i + 1) * size]).tobytes()
            hashes.append(hashlib.sha256(parent + tokens).digest())
        return hashes

    @staticmethod
    def _root(seq: Sequence) -> bytes:
        return hashlib.sha256(f"strongroom-kv\0{seq.model}\0{seq.cache_salt}".encode()).digest()


class BlockRelease:
    """Blocks returned to the pool if every sequence added so far were preempted together.

    A block shared by several sequences (a common cached prefix) returns only once all of its
    holders are added. Nothing is freed: this only counts, for choosing victims."""

    def __init__(self, pool: BlockPool, keep: list[int]) -> None:
        self._pool = pool
        self._keep = set(keep)
        self._num_holders: dict[int, int] = {}
        self.num_freed_blocks = 0

    def add(self, seq: Sequence) -> int:
        """Count ``seq`` among the preempted; returns ``num_freed_blocks``."""
        for block_id in seq.block_ids:
            n = self._num_holders.get(block_id, 0) + 1
            self._num_holders[block_id] = n
            if n == self._pool.ref_count(block_id) and block_id not in self._keep:
                self.num_freed_blocks += 1
        return self.num_freed_blocks
