from engine.block_pool import BlockPool
from engine.kv_cache_manager import KVCacheManager
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler, SchedulerOutput
from engine.sequence import Sequence, SequenceStatus

P = SamplingParams(temperature=0)


def make(
    num_blocks: int = 16,
    block_size: int = 4,
    seqs: int = 8,
    tokens: int = 64,
    models: tuple[str, ...] = ("a", "b"),
) -> Scheduler:
    kv = KVCacheManager(BlockPool(num_blocks), block_size)
    return Scheduler(kv, list(models), max_num_seqs=seqs, max_num_batched_tokens=tokens)


_arrival = iter(range(10**6))


def req(n: int, model: str = "a", priority: int = 0, start: int = 0) -> Sequence:
    return Sequence(
        f"r{next(_arrival)}",
        model,
        list(range(start, start + n)),
        P,
        priority=priority,
        arrival=next(_arrival),
    )


def run(s: Scheduler) -> SchedulerOutput:
    """One step: schedule, pretend the model ran, sample token 7 where due."""
    out = s.schedule()
    s.update(out)
    for item in out.scheduled:
        if item.is_sampling:
            item.seq.append_token(7)
    return out


def shares(out: SchedulerOutput) -> list[tuple[str, int, int]]:
    return [(i.seq.request_id, i.start, i.num_new_tokens) for i in out.scheduled]


def test_chunked_prefill_then_decode_under_budget() -> None:
    s = make(tokens=8)
    long, short = req(20), req(3)
    s.add(long)
    s.add(short)
    out = run(s)
    assert shares(out) == [(long.request_id, 0, 8)]
    assert long.block_ids == [0, 1]
    out = run(s)  # the budget is spent on long's next chunk
    assert shares(out) == [(long.request_id, 8, 8)]
    out = run(s)
    assert shares(out) == [(long.request_id, 16, 4), (short.request_id, 0, 3)]
    assert out.scheduled[0].is_sampling and out.scheduled[1].is_sampling
    out = run(s)  # both decode: one token each
    assert shares(out) == [(long.request_id, 20, 1), (short.request_id, 3, 1)]
    assert long.block_ids == [0, 1, 2, 3, 4, 6]
    assert short.block_ids == [5]


def test_priority_orders_waiting_within_a_model() -> None:
    s = make(seqs=1)
    low, high = req(4, priority=5), req(4, priority=-1)
    s.add(low)
    s.add(high)
    assert shares(run(s)) == [(high.request_id, 0, 4)]
    assert [q.request_id for q in s.waiting("a")] == [low.request_id]


def test_round_robin_across_models_resists_a_flood() -> None:
    s = make(num_blocks=64, seqs=4, tokens=1000)
    flood = [req(4, "a") for _ in range(10)]
    for f in flood:
        s.add(f)
    lone = req(4, "b")
    s.add(lone)
    out = run(s)
    models = [i.seq.model for i in out.scheduled]
    assert models == ["a", "b", "a", "a"]
    assert lone.status is SequenceStatus.RUNNING


def test_cap_on_running_sequences() -> None:
    s = make(num_blocks=64, seqs=2)
    for _ in range(5):
        s.add(req(4))
    run(s)
    assert s.num_running == 2 and s.num_waiting == 3


def test_preemption_by_recompute_frees_the_latest_lowest_priority() -> None:
    s = make(num_blocks=4, block_size=4, tokens=100)
    first, second = req(7), req(8, "b")
    s.add(first)
    s.add(second)
    run(s)
    assert first.block_ids == [0, 1] and second.block_ids == [2, 3]
    # first needs no new block (8th token fits); second's 9th token needs one: none left.
    out = run(s)
    assert [q.request_id for q in out.preempted] == [second.request_id]
    assert shares(out) == [(first.request_id, 7, 1)]
    assert second.status is SequenceStatus.WAITING
    assert second.num_computed_tokens == 0 and second.block_ids == []
    assert second.num_tokens == 9  # its sampled token is kept and recomputed
    assert s.num_preemptions == 1
    assert s.kv.pool.free_block_ids() == [3, 2]


def test_sequence_that_outgrows_the_whole_pool_finishes_with_length() -> None:
    s = make(num_blocks=2, block_size=4)
    only = req(7)
    s.add(only)
    run(s)
    run(s)  # 8 tokens computed: both blocks full
    out = run(s)
    assert out.finished == [only]
    assert only.status is SequenceStatus.FINISHED_LENGTH
    assert s.kv.num_free_blocks == 2 and not s.has_work


def test_finish_frees_waiting_and_running() -> None:
    s = make(seqs=1)
    a, b = req(4), req(4)
    s.add(a)
    s.add(b)
    run(s)
    s.finish(b, SequenceStatus.FINISHED_ABORTED)
    s.finish(a, SequenceStatus.FINISHED_ABORTED)
    assert not s.has_work
    assert s.kv.num_free_blocks == 16


def test_prefix_cache_hit_skips_computed_tokens() -> None:
    s = make()
    a = req(9, start=100)
    s.add(a)
    run(s)
    s.finish(a, SequenceStatus.FINISHED_STOPPED)
    b = req(9, start=100)
    s.add(b)
    out = run(s)
    assert shares(out) == [(b.request_id, 8, 1)]
    assert b.num_cached_tokens == 8
