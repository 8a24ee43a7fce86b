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
