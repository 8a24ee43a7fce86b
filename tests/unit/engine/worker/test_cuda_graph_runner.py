"""The graph runner's input staging and greedy-step bookkeeping, on the CPU with stand-in graphs;
capture and replay run in test_cuda."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from engine.tuning import DEFAULT_TUNING
from engine.worker.cuda_graph_runner import Captured, CudaGraphRunner, _buckets


def test_buckets_cover_every_batch_size_up_to_the_cap() -> None:
    assert _buckets(64) == [1, 2, 4, 8, 16, 32, 48, 64]
    assert _buckets(20) == [1, 2, 4, 8, 16, 20]
    assert _buckets(1) == [1]


def test_stage_pads_to_the_bucket_and_disables_padding_rows() -> None:
    runner = CudaGraphRunner(
        nn.Identity(),  # type: ignore[arg-type]
        max_num_seqs=8,
        max_blocks=4,
        block_size=16,
        device=torch.device("cpu"),
    )
    first = runner.stage(
        [7, 8, 9, 10, 11], [3, 40, 0, 5, 6], [3, 40, 16, 5, 6], [[0], [1, 2, 5], [9], [3], [4]]
    )
    assert first == 8
    # a smaller step next: rows it does not use must not keep the previous step's slots
    bucket = runner.stage([5, 6, 7], [16, 33, 2], [16, 49, 2], [[0, 3], [4, 5, 6], [7]])
    assert bucket == 4
    assert runner.token_ids[:3].tolist() == [5, 6, 7]
    assert runner.positions[:3].tolist() == [16, 33, 2]
    assert runner.slot_mapping[:4].tolist() == [16, 49, 2, -1]
    assert runner.context_lens[:4].tolist() == [17, 34, 3, 0]
    assert runner.block_tables[0, :2].tolist() == [0, 3]
    assert runner.block_tables[1, :3].tolist() == [4, 5, 6]
    assert runner.block_tables[2, 0].item() == 7
    meta = runner._meta(bucket)
    assert meta.num_seqs == 4 and meta.query_starts.tolist() == [0, 1, 2, 3, 4]


def test_block_tables_follow_their_lists_whatever_happened_to_them() -> None:
    runner = CudaGraphRunner(
        nn.Identity(),  # type: ignore[arg-type]
        max_num_seqs=4,
        max_blocks=6,
        block_size=16,
        device=torch.device("cpu"),
    )
    grows, replaced, shrinks = [1, 2], [3, 4], [5, 6, 7]

    def stage() -> list[list[int]]:
        tables = [grows, replaced, shrinks]
        runner.stage([0, 0, 0], [0, 0, 0], [0, 0, 0], tables)
        return [runner.block_tables[i, : len(t)].tolist() for i, t in enumerate(tables)]

    assert stage() == [[1, 2], [3, 4], [5, 6, 7]]
    grows.extend([8, 9])  # a sequence's next blocks: appended in place
    replaced = [10, 11]  # preempted and re-admitted: a new list, the same length
    shrinks[:] = [12]  # never done by the KV manager, still handled
    assert stage() == [[1, 2, 8, 9], [10, 11], [12]]
    # Rows move when a sequence in front of them ends: each row still gets its own table.
    runner.stage([0, 0], [0, 0], [0, 0], [shrinks, grows])
    assert runner.block_tables[0, :1].tolist() == [12]
    assert runner.block_tables[1, :4].tolist() == [1, 2, 8, 9]


class _Replay:
    """A captured graph's stand-in on the CPU: records the inputs each replay reads and, for a
    greedy bucket, does what ``engine.kernels.step_advance`` does (the "argmax" is 10 x position
    + 1, so a token says which step made it)."""

    def __init__(
        self, runner: CudaGraphRunner, bucket: int, parity: int | None, seen: list[list[tuple[int, ...]]]
    ):
        self.runner, self.bucket, self.parity, self.seen = runner, bucket, parity, seen

    def replay(self) -> None:
        r, b = self.runner, self.bucket
        rows = zip(r.token_ids[:b].tolist(), r.positions[:b].tolist(), r.slot_mapping[:b].tolist(),
                   r.context_lens[:b].tolist(), strict=True)  # fmt: skip
        self.seen.append(list(rows))
        if self.parity is None:
            return
        live = r.context_lens[:b] > 0
        tokens = r.positions[:b] * 10 + 1
        r.token_ids[:b] = tokens
        r.ring[self.parity, :b] = tokens
        pos = r.positions[:b] + live.long()
        r.positions[:b] = pos
        r.context_lens[:b] += live.int()
        index = (pos // r.block_size).clamp(max=r.max_blocks - 1).unsqueeze(1)
        blocks = r.block_tables[:b].long().gather(1, index).squeeze(1)
        r.slot_mapping[:b] = torch.where(live, blocks * r.block_size + pos % r.block_size, r.slot_mapping[:b])


def _greedy_runner(loop_max: int) -> tuple[CudaGraphRunner, list[list[tuple[int, ...]]]]:
    runner = CudaGraphRunner(
        nn.Identity(),  # type: ignore[arg-type]  # the step is never run: the graphs are stand-ins
        max_num_seqs=4,
        max_blocks=8,
        block_size=4,
        device=torch.device("cpu"),
        tuning=replace(DEFAULT_TUNING, greedy_tail_max_bucket=loop_max),
    )
    seen: list[list[tuple[int, ...]]] = []
    for b in runner.buckets:
        parities = (0, 1) if b <= runner.tuning.greedy_tail_max_bucket else (None,)
        runner.graphs[b] = [Captured(_Replay(runner, b, p, seen), torch.zeros(b, 1)) for p in parities]  # type: ignore[arg-type]
    return runner, seen


class _Host:
    """The model runner's side of decode steps: sequences' positions and block lists."""

    def __init__(self, runner: CudaGraphRunner, starts: list[int]) -> None:
        self.runner, self.positions = runner, starts
        self.tables = [list(range(10 * i, 10 * i + p // 4 + 1)) for i, p in enumerate(starts)]

    def step(
        self, pending: torch.Tensor | None, rows: list[int] | None = None, sources: list[int] | None = None
    ) -> list[tuple[int, ...]]:
        """One step of these rows (all by default), reading their tokens from pending[sources]."""
        rows = list(range(len(self.positions))) if rows is None else rows
        bs = self.runner.block_size
        for i in rows:
            if self.positions[i] // bs >= len(self.tables[i]):  # the KV manager appends a block
                self.tables[i].append(self.tables[i][-1] + 1)
        pos = [self.positions[i] for i in rows]
        tables = [self.tables[i] for i in rows]
        slots = [t[p // bs] * bs + p % bs for t, p in zip(tables, pos, strict=True)]
        dst = list(range(len(rows)))
        scatter = (dst, pending, dst if sources is None else sources) if pending is not None else None
        self.runner.run([0] * len(rows), pos, slots, tables, scatter)
        for i in rows:
            self.positions[i] += 1
        return [
            (10 * (p - 1) + 1 if pending is not None else 0, p, s, p + 1)
            for p, s in zip(pos, slots, strict=True)
        ]


def test_greedy_steps_continue_on_the_device_until_a_block_is_needed() -> None:
    runner, seen = _greedy_runner(1)
    host = _Host(runner, [5])
    want = [host.step(None)]  # the first decode step is staged
    parities = []
    for _ in range(9):  # positions 6 .. 14: blocks are needed at 8 and 12
        assert runner.greedy is not None
        parities.append(runner.greedy.data_ptr())
        want.append(host.step(runner.greedy))
    assert seen == want  # every replay read exactly what staging would have given it
    assert runner.num_device_steps == 9 - 2  # all but the two steps that took a new block
    assert len(set(parities)) == 2 and parities[0] != parities[1]  # the ring slots alternate


def test_anything_else_is_staged() -> None:
    runner, seen = _greedy_runner(2)
    host = _Host(runner, [4, 8])  # four steps without a new block

    def made_by(*positions: int) -> torch.Tensor:  # tokens as a replay at these positions makes them
        return torch.tensor([10 * p + 1 for p in positions])

    want = [host.step(None), host.step(runner.greedy)]
    assert runner.num_device_steps == 1
    # Tokens that are not the ring's (a sampled step): staged, and scattered from them.
    want.append(host.step(made_by(5, 9)))
    assert runner.num_device_steps == 1
    want.append(host.step(runner.greedy))
    assert runner.num_device_steps == 2
    # Row 0 leaves: row 1 moves up and reads its token from the ring's row 1: staged.
    want.append(host.step(runner.greedy, rows=[1], sources=[1]))
    assert runner.num_device_steps == 2
    want.append(host.step(runner.greedy, rows=[1]))  # then on the device again
    assert runner.num_device_steps == 3
    # A bucket without the greedy tail in between: its replay moved nothing on (and its staging
    # overwrote the inputs), so the next step is staged, even reading the same ring slot.
    last_ring = runner.greedy
    _Host(runner, [1, 2, 3]).step(None)
    del seen[-1]
    want.append(host.step(last_ring, rows=[1]))
    assert runner.num_device_steps == 3
    # Rows in another order: staged, each row reading its own token from the ring.
    both = _Host(runner, [8, 12])
    want.append(both.step(None))
    want.append(both.step(runner.greedy))
    assert runner.num_device_steps == 4
    assert runner.greedy is not None
    want.append(both.step(runner.greedy, rows=[1, 0], sources=[1, 0]))
    assert runner.num_device_steps == 4
    assert seen == want
