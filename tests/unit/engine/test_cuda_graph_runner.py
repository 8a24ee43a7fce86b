"""The graph runner's input staging (CPU-checkable); capture and replay run in test_cuda."""

from __future__ import annotations

import torch
from torch import nn

from engine.cuda_graph_runner import CudaGraphRunner, _buckets


def test_buckets_cover_every_batch_size_up_to_the_cap() -> None:
    assert _buckets(64) == [1, 2, 4, 8, 16, 32, 48, 64]
    assert _buckets(20) == [1, 2, 4, 8, 16, 20]
    assert _buckets(1) == [1]


def test_stage_pads_to_the_bucket_and_disables_padding_rows() -> None:
    runner = CudaGraphRunner(
        nn.Identity(), max_num_seqs=8, max_blocks=4, block_size=16, device=torch.device("cpu")
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
        nn.Identity(), max_num_seqs=4, max_blocks=6, block_size=16, device=torch.device("cpu")
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
