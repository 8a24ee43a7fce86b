import pytest

from engine.core.block_pool import BlockPool
from engine.errors import EngineError


def test_allocates_from_the_front_and_frees_to_the_back() -> None:
    pool = BlockPool(6)
    assert pool.allocate(2) == [0, 1]
    assert pool.allocate(1) == [2]
    assert pool.free_block_ids() == [3, 4, 5]
    pool.free([2, 0])
    assert pool.free_block_ids() == [3, 4, 5, 2, 0]
    assert pool.allocate(4) == [3, 4, 5, 2]
    assert pool.num_free_blocks == 1


def test_cached_free_block_is_revived_by_touch_and_evicted_by_allocate() -> None:
    pool = BlockPool(3)
    [a, b] = pool.allocate(2)
    pool.cache(a, b"h-a")
    pool.cache(b, b"h-b")
    pool.free([b, a])  # tail first
    assert pool.free_block_ids() == [2, 1, 0]
    assert pool.lookup(b"h-a") == 0
    pool.touch([0])
    assert pool.ref_count(0) == 1
    assert pool.free_block_ids() == [2, 1]
    # Allocating pops 2 (plain) then 1 (cached): block 1's hash is evicted.
    assert pool.allocate(2) == [2, 1]
    assert pool.lookup(b"h-b") is None
    assert pool.lookup(b"h-a") == 0
    assert pool.num_cached_blocks == 1


def test_shared_block_returns_to_queue_only_at_zero_refs() -> None:
    pool = BlockPool(2)
    [a] = pool.allocate(1)
    pool.touch([a])
    pool.free([a])
    assert not pool.is_free(a)
    pool.free([a])
    assert pool.free_block_ids() == [1, 0]


def test_duplicate_hash_keeps_the_first_block() -> None:
    pool = BlockPool(2)
    a, b = pool.allocate(2)
    pool.cache(a, b"same")
    pool.cache(b, b"same")
    assert pool.lookup(b"same") == a
    assert pool.block_hash(b) is None


def test_errors_on_exhaustion_and_double_free() -> None:
    pool = BlockPool(1)
    with pytest.raises(EngineError, match="exhausted"):
        pool.allocate(2)
    [a] = pool.allocate(1)
    pool.free([a])
    with pytest.raises(EngineError, match="freed more often"):
        pool.free([a])
    with pytest.raises(EngineError):
        BlockPool(0)


def test_reset_cache_drops_only_free_cached_blocks() -> None:
    pool = BlockPool(3)
    a, b = pool.allocate(2)
    pool.cache(a, b"a")
    pool.cache(b, b"b")
    pool.free([a])
    assert pool.reset_cache() == 1
    assert pool.lookup(b"a") is None
    assert pool.lookup(b"b") == b
