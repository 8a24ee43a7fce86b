from engine.core.block_pool import BlockPool
from engine.core.kv_cache_manager import KVCacheManager
from engine.core.sampling_params import SamplingParams
from engine.core.sequence import Sequence

P = SamplingParams(temperature=0)


def seq(tokens: list[int], model: str = "m", tenant: str = "") -> Sequence:
    return Sequence("r", model, tokens, P, cache_salt=tenant)


def computed(kv: KVCacheManager, s: Sequence) -> None:
    assert kv.allocate(s, s.num_tokens - s.num_computed_tokens)
    s.num_computed_tokens = s.num_tokens
    kv.commit(s)


def test_allocate_rounds_up_to_blocks() -> None:
    kv = KVCacheManager(BlockPool(4), 4)
    s = seq(list(range(5)))
    assert kv.allocate(s, 5)
    assert s.block_ids == [0, 1]
    s.num_computed_tokens = 5
    assert kv.allocate(s, 3)  # fits in block 1
    assert s.block_ids == [0, 1]
    assert kv.allocate(s, 4)
    assert s.block_ids == [0, 1, 2]


def test_allocate_fails_without_side_effects() -> None:
    kv = KVCacheManager(BlockPool(2), 4)
    s = seq(list(range(12)))
    assert not kv.allocate(s, 12)
    assert s.block_ids == []
    assert kv.num_free_blocks == 2


def test_prefix_hit_reuses_full_blocks_and_leaves_last_token() -> None:
    kv = KVCacheManager(BlockPool(8), 4)
    first = seq(list(range(10)))
    computed(kv, first)
    assert first.block_ids == [0, 1, 2]
    kv.free(first)
    assert kv.pool.free_block_ids() == [3, 4, 5, 6, 7, 2, 1, 0]
    second = seq([*range(8), 99, 98])
    hits = kv.find_cached_prefix(second)
    assert hits == [0, 1]
    assert kv.allocate(second, 2, hits)
    assert second.block_ids == [0, 1, 3]
    assert second.num_computed_tokens == 8
    # Exactly block-aligned and fully cached: the last block is recomputed for its logits.
    third = seq(list(range(8)))
    assert kv.find_cached_prefix(third) == [0]


def test_prefix_is_keyed_by_model_and_tenant() -> None:
    kv = KVCacheManager(BlockPool(8), 4)
    computed(kv, seq(list(range(9)), tenant="bank-a"))
    assert kv.find_cached_prefix(seq(list(range(9)), tenant="bank-a")) == [0, 1]
    assert kv.find_cached_prefix(seq(list(range(9)), tenant="bank-b")) == []
    assert kv.find_cached_prefix(seq(list(range(9)), model="other", tenant="bank-a")) == []
    assert kv.find_cached_prefix(seq(list(range(9)))) == []


def test_lru_evicts_tail_blocks_first() -> None:
    kv = KVCacheManager(BlockPool(3), 4)
    a = seq(list(range(12)))
    computed(kv, a)
    kv.free(a)
    assert kv.pool.free_block_ids() == [2, 1, 0]
    b = seq([50, 51, 52])
    assert kv.allocate(b, 3)
    assert b.block_ids == [2]  # a's tail block evicted; its head still cached
    assert kv.find_cached_prefix(seq(list(range(12)))) == [0, 1]


def test_cached_free_blocks_count_against_capacity_when_revived() -> None:
    kv = KVCacheManager(BlockPool(2), 4)
    a = seq(list(range(5)))
    computed(kv, a)
    kv.free(a)
    b = seq([*range(4), 7, 8, 9, 10, 11])
    hits = kv.find_cached_prefix(b)
    assert hits == [0]
    # needs block 0 (revived) plus two new blocks, but only one other block exists
    assert not kv.allocate(b, 5, hits)
    assert kv.allocate(b, 4, hits)
    assert b.block_ids == [0, 1]


def test_disabled_prefix_caching_never_hits() -> None:
    kv = KVCacheManager(BlockPool(4), 4, enable_prefix_caching=False)
    computed(kv, seq(list(range(9))))
    assert kv.find_cached_prefix(seq(list(range(9)))) == []
    assert kv.pool.num_cached_blocks == 0


def test_release_counts_a_shared_block_once_its_last_holder_is_added() -> None:
    kv = KVCacheManager(BlockPool(8), 4)
    first = seq(list(range(10)))
    computed(kv, first)  # [0, 1, 2], blocks 0 and 1 full and cached
    second = seq([*range(8), 50, 51])
    hits = kv.find_cached_prefix(second)
    assert kv.allocate(second, 2, hits)
    assert (first.block_ids, second.block_ids) == ([0, 1, 2], [0, 1, 3])
    release = kv.release(keep=[])
    assert release.add(first) == 1  # block 2 only: 0 and 1 are still held by second
    assert release.add(second) == 4  # now 0, 1 and 3 as well
    # A waiter that would hit block 0 gains nothing from freeing it.
    kept = kv.release(keep=[0])
    kept.add(first)
    assert kept.add(second) == 3
    assert kv.num_free_blocks == 4  # counting frees nothing


def test_blocks_short_counts_a_free_cached_block_as_taken_when_revived() -> None:
    kv = KVCacheManager(BlockPool(3), 4)
    a = seq(list(range(5)))
    computed(kv, a)
    kv.free(a)  # blocks 1, 0 free; 0 cached
    b = seq([*range(4), *range(20, 28)])
    hits = kv.find_cached_prefix(b)
    assert hits == [0]
    assert kv.num_blocks_short(b, 8, hits) == 0  # two new blocks out of three free, one revived
    assert kv.num_blocks_short(b, 9, hits) == 1
    assert kv.can_allocate(b, 8, hits) and not kv.can_allocate(b, 9, hits)
