import pytest

from engine.core.block_pool import BlockPool
from engine.core.kv_cache_manager import KVCacheManager
from engine.core.sampling_params import SamplingParams
from engine.core.scheduler import Scheduler, SchedulerOutput
from engine.core.sequence import Sequence, SequenceStatus

P = SamplingParams(temperature=0)


def make(
    num_blocks: int = 16,
    block_size: int = 4,
    seqs: int = 8,
    tokens: int = 64,
    models: tuple[str, ...] = ("a", "b"),
    threshold: int | None = None,
) -> Scheduler:
    kv = KVCacheManager(BlockPool(num_blocks), block_size)
    return Scheduler(
        kv,
        list(models),
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        long_prefill_token_threshold=threshold,
    )


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


# Priority preemption. Smaller priority values are more urgent.


def finish_at(s: Scheduler, out: SchedulerOutput, num_output_tokens: int) -> list[Sequence]:
    """End every sequence of the step that has sampled its ``num_output_tokens``-th token."""
    done = [i.seq for i in out.scheduled if i.is_sampling and i.seq.num_output_tokens >= num_output_tokens]
    for seq in done:
        s.finish(seq, SequenceStatus.FINISHED_STOPPED)
    return done


def ids(seqs: list[Sequence]) -> list[str]:
    return [q.request_id for q in seqs]


def cap_full_of_three() -> tuple[Scheduler, Sequence, Sequence, Sequence]:
    """Cap 3, running mid (p3, a), early (p5, b), late (p5, a), one block each, all decoding."""
    s = make(seqs=3)
    mid, early, late = req(4, "a", 3, start=100), req(4, "b", 5, start=200), req(4, "a", 5, start=300)
    for q in (mid, early, late):
        s.add(q)
    run(s)
    assert (mid.block_ids, late.block_ids, early.block_ids) == ([0], [1], [2])
    return s, mid, early, late


def test_urgent_arrival_preempts_the_least_urgent_latest_when_the_cap_is_full() -> None:
    s, mid, early, late = cap_full_of_three()
    urgent = req(4, "b", 0, start=400)
    s.add(urgent)
    out = run(s)
    assert ids(out.preempted) == ids([late])
    # late's decode share is taken back; its blocks return tail first.
    assert shares(out) == [(mid.request_id, 4, 1), (early.request_id, 4, 1), (urgent.request_id, 0, 4)]
    assert urgent.block_ids == [6]
    assert s.kv.pool.free_block_ids() == [*range(7, 16), 5, 1]
    assert late.status is SequenceStatus.WAITING and late.block_ids == [] and late.num_tokens == 5
    assert s.waiting("a") == [late] and s.num_running == 3
    out = run(s)  # late cannot preempt anyone: nothing running is less urgent than p5
    assert out.preempted == [] and s.waiting("a") == [late]


def test_the_preempted_sequence_resumes_and_finishes() -> None:
    s, _, _, late = cap_full_of_three()
    urgent = req(4, "b", 0, start=400)
    s.add(urgent)
    run(s)
    run(s)
    s.finish(urgent, SequenceStatus.FINISHED_STOPPED)  # frees [7, 6]
    out = run(s)
    # Back in, its first block still cached: only its sampled token is recomputed.
    assert shares(out)[-1] == (late.request_id, 4, 1)
    assert late.block_ids == [1, 8] and late.num_cached_tokens == 4
    while s.has_work:
        finish_at(s, run(s), 4)
    assert late.status is SequenceStatus.FINISHED_STOPPED and late.num_output_tokens == 4
    assert late.num_preemptions == 1 and s.num_preemptions == 1
    assert s.kv.num_free_blocks == 16


@pytest.mark.parametrize(
    ("prompt_len", "victims", "urgent_blocks", "free_after"),
    [
        (16, ["late"], [6, 7, 5, 3], [2]),  # 4 blocks, 2 free: late's 3 suffice
        (24, ["late", "early"], [6, 7, 5, 3, 2, 4], [1, 0]),  # 6 blocks: both needed
    ],
)
def test_urgent_arrival_preempts_only_as_many_as_the_blocks_need(
    prompt_len: int, victims: list[str], urgent_blocks: list[int], free_after: list[int]
) -> None:
    s = make(num_blocks=8)
    seqs = {"early": req(8, "a", 5, start=100), "late": req(8, "b", 5, start=200)}
    for q in seqs.values():
        s.add(q)
    run(s)
    urgent = req(prompt_len, "a", 0, start=300)
    s.add(urgent)
    out = run(s)  # decodes first: early takes block 4, late block 5; then urgent finds 2 free
    assert ids(out.preempted) == [seqs[v].request_id for v in victims]
    assert urgent.block_ids == urgent_blocks
    assert s.kv.pool.free_block_ids() == free_after
    assert shares(out)[-1] == (urgent.request_id, 0, prompt_len)
    if victims == ["late"]:
        assert seqs["early"].block_ids == [0, 1, 4]


def test_no_futile_preemption_and_nothing_less_urgent_jumps_the_blocked() -> None:
    s = make(num_blocks=8)
    equal, low = req(8, "a", 0, start=100), req(8, "b", 5, start=200)
    s.add(equal)
    s.add(low)
    run(s)
    big, after = req(24, "a", 0, start=300), req(4, "b", 1, start=400)
    s.add(big)
    s.add(after)
    out = run(s)
    # big needs 6 blocks: 2 free plus low's 3 are not enough, and equal is not less urgent.
    assert out.preempted == [] and low.block_ids == [2, 3, 5]
    # after would fit in the free blocks, but may not take what the more urgent big waits for.
    assert s.waiting("a") == [big] and s.waiting("b") == [after]
    assert s.kv.pool.free_block_ids() == [6, 7]


@pytest.mark.parametrize("priority", [5, 9])
def test_equal_or_less_urgent_never_preempts_at_the_cap(priority: int) -> None:
    s = make(seqs=2)
    high, low = req(4, "a", 0), req(4, "b", 5)
    s.add(high)
    s.add(low)
    run(s)
    waiter = req(4, "a", priority)
    s.add(waiter)
    for _ in range(3):
        assert run(s).preempted == []
    assert s.running == [high, low] and s.waiting("a") == [waiter]


def test_equal_priority_never_preempts_when_blocks_are_short() -> None:
    s = make(num_blocks=4)
    first, second = req(7, "a", start=100), req(3, "b", start=200)
    s.add(first)
    s.add(second)
    run(s)  # first [0, 1], second [2]; their next tokens fit their blocks
    waiter = req(8, "a", start=300)
    s.add(waiter)
    out = run(s)
    assert out.preempted == [] and s.waiting("a") == [waiter]
    assert s.kv.pool.free_block_ids() == [3]


def test_a_victim_is_not_readmitted_nor_overtaken_in_the_same_step() -> None:
    s = make(num_blocks=8)
    early, late = req(8, "a", 5, start=100), req(8, "b", 5, start=200)
    s.add(early)
    s.add(late)
    run(s)
    urgent, peer = req(12, "a", 0, start=300), req(4, "a", 5, start=400)
    s.add(urgent)
    s.add(peer)
    out = run(s)
    assert ids(out.preempted) == ids([late])
    assert urgent.block_ids == [6, 7, 5]
    # Two blocks are left, enough for peer or, with its cached head, late: neither goes in now.
    assert s.kv.pool.free_block_ids() == [3, 2]
    assert s.waiting("a") == [peer] and s.waiting("b") == [late]


def test_pool_dry_takes_back_a_less_urgent_decode_rather_than_an_urgent_chunk() -> None:
    s = make(num_blocks=4, tokens=8)
    low = req(4, "b", 5, start=100)
    s.add(low)
    run(s)  # low [0]
    urgent = req(20, "a", 0, start=200)
    s.add(urgent)
    run(s)  # low decodes into [1]; urgent's first chunk of 7 gets [2, 3]
    out = run(s)
    # Decodes go first, so low took no block this time, but urgent's chunk needs two and the
    # pool is dry: low, already scheduled, is the victim, not urgent itself.
    assert ids(out.preempted) == ids([low])
    assert shares(out) == [(urgent.request_id, 7, 7)]
    assert urgent.block_ids == [2, 3, 1, 0] and s.kv.pool.free_block_ids() == []


def test_an_urgent_flood_on_one_model_holds_back_less_urgent_work_on_another() -> None:
    s = make(num_blocks=64, seqs=4, tokens=1000)
    b1, b2 = req(4, "b", 5), req(4, "b", 5)
    s.add(b1)
    s.add(b2)
    run(s)
    flood = [req(4, "a", 0) for _ in range(6)]
    for f in flood:
        s.add(f)
    out = run(s)
    # Two free slots, then each further urgent arrival preempts the least urgent, latest first.
    assert ids(out.preempted) == ids([b2, b1])
    assert s.running == flood[:4] and s.waiting("b") == [b1, b2]
    finished: list[Sequence] = []
    while s.has_work:
        if s.waiting("a"):
            assert all(q.model == "a" for q in s.running)
        finished += finish_at(s, run(s), 3)
    assert set(ids(finished[:4])) == set(ids(flood[:4]))
    assert set(ids(finished[4:])) == set(ids([*flood[4:], b1, b2]))
    assert s.num_preemptions == 2 and s.kv.num_free_blocks == 64


def test_an_equal_priority_flood_on_one_model_preempts_nothing_on_another() -> None:
    s = make(num_blocks=64, seqs=4, tokens=1000)
    lone = req(4, "b")
    s.add(lone)
    run(s)
    for _ in range(10):
        s.add(req(4, "a"))
    finished: list[Sequence] = []
    while s.has_work:
        finished += finish_at(s, run(s), 3)
    assert s.num_preemptions == 0 and lone in finished[:4]


def test_a_victims_block_that_the_waiter_would_hit_in_the_cache_frees_no_room() -> None:
    s = make(num_blocks=4)
    low, equal = req(5, "a", 5, start=100), req(4, "b", 0, start=200)
    s.add(low)
    s.add(equal)
    run(s)  # equal, more urgent, goes in first: equal [0]; low [1, 2] with block 1 cached
    urgent = req(12, "a", 0, start=100)  # shares low's first block
    s.add(urgent)
    out = run(s)  # equal decodes into [3]: the pool is dry
    # urgent hits block 1 and needs 2 more; preempting low frees block 1 (no gain) and block 2.
    assert s.kv.find_cached_prefix(urgent) == [1]
    assert out.preempted == [] and low.block_ids == [1, 2]
    assert s.waiting("a") == [urgent]


def test_a_held_place_is_decoded_next_and_read_from_the_device() -> None:
    s = make()
    a = req(3)
    s.add(a)
    s.update(s.schedule())
    a.hold_place()  # the token sampled by the step above is still on the device
    (item,) = s.schedule().scheduled
    assert (item.start, item.num_new_tokens, item.is_sampling, item.reads_pending) == (3, 1, True, True)
    assert a.token_ids == [0, 1, 2]


# Chunked prefill beside running streams (long_prefill_token_threshold).


def one_stream(threshold: int | None, tokens: int = 16) -> tuple[Scheduler, Sequence]:
    """A step budget of ``tokens`` and one sequence decoding."""
    s = make(num_blocks=32, tokens=tokens, threshold=threshold)
    stream = req(3)
    s.add(stream)
    run(s)
    return s, stream


def test_a_long_arrival_is_chunked_beside_decodes_and_leaves_room_for_a_short_one() -> None:
    s, stream = one_stream(threshold=4)
    long, short = req(20), req(3)
    s.add(long)
    s.add(short)
    out = run(s)
    assert shares(out) == [(stream.request_id, 3, 1), (long.request_id, 0, 4), (short.request_id, 0, 3)]
    out = run(s)  # decodes first, then the long prompt's next chunk
    assert shares(out) == [(stream.request_id, 4, 1), (short.request_id, 3, 1), (long.request_id, 4, 4)]
    assert not out.scheduled[2].is_sampling
    for _ in range(3):
        run(s)
    assert long.num_computed_tokens == 20 and long.num_output_tokens == 1
    assert stream.num_output_tokens == 6  # a token every step


def test_a_lone_prompt_takes_the_whole_budget() -> None:
    s = make(num_blocks=32, tokens=16, threshold=4)
    long = req(40)
    s.add(long)
    assert shares(run(s)) == [(long.request_id, 0, 16)]
    late = req(3)
    s.add(late)  # someone else has work now: the cap holds
    assert shares(run(s)) == [(long.request_id, 16, 4), (late.request_id, 0, 3)]


def test_without_a_threshold_a_long_prompt_takes_what_the_decodes_leave() -> None:
    s, stream = one_stream(threshold=None)
    long, short = req(40), req(3)
    s.add(long)
    s.add(short)
    assert shares(run(s)) == [(stream.request_id, 3, 1), (long.request_id, 0, 15)]
    assert shares(run(s)) == [(stream.request_id, 4, 1), (long.request_id, 15, 15)]
    assert s.waiting("a") == [short]  # behind the long prompt's whole prefill


def test_an_urgent_long_arrival_preempts_only_for_its_first_chunk() -> None:
    s = make(num_blocks=6, tokens=64, threshold=4)
    low = [req(2, "a", 5, start=100 * k) for k in range(1, 6)]
    for q in low:
        s.add(q)
    run(s)  # five one-block sequences, one block free
    urgent = req(30, "b", 0)
    s.add(urgent)
    out = run(s)
    # Its first chunk (4 tokens) needs one block and one is free: nobody is preempted.
    assert out.preempted == [] and urgent.block_ids == [5]
    assert (out.scheduled[-1].seq, out.scheduled[-1].num_new_tokens) == (urgent, 4)


def test_capped_chunks_share_the_budget_in_priority_order() -> None:
    s, stream = one_stream(threshold=4, tokens=6)
    late_urgent, early_lax = req(20, priority=-1), req(20, priority=2)
    s.add(early_lax)
    s.add(late_urgent)
    out = run(s)  # admission: the urgent class first
    assert shares(out) == [
        (stream.request_id, 3, 1),
        (late_urgent.request_id, 0, 4),
        (early_lax.request_id, 0, 1),
    ]
    out = run(s)  # running chunks: by priority, after the decode
    assert shares(out) == [
        (stream.request_id, 4, 1),
        (late_urgent.request_id, 4, 4),
        (early_lax.request_id, 1, 1),
    ]
