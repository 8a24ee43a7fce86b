"""Decode steps as replayed CUDA graphs: one graph per batch-size bucket, per hosted model.

A decode step of ``n`` sequences (one new token each) is padded to the smallest bucket ``>= n``
and replayed from static input buffers, so hundreds of small launches cost one::

    static buffers [bucket]      real rows [0, n)            padding rows [n, bucket)
    token_ids, positions         this step's tokens          0
    slot_mapping                 where each new K/V goes     -1  (the KV write skips it)
    context_lens                 start + 1                   0   (attention writes zeros)
    block_tables [bucket, W]     each sequence's blocks      stale, never read

Everything a captured kernel's grid depends on is fixed by the bucket (see
``engine.attention.triton_paged.num_splits_for``), never by context lengths. Graphs share one
memory pool; a bucket is captured the first time a step needs it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from engine.attention.metadata import AttentionMetadata
from engine.device_transfer import scatter_rows

__all__ = ["CudaGraphRunner"]


def _buckets(max_num_seqs: int) -> list[int]:
    sizes = [1, 2, 4, 8, *range(16, max_num_seqs + 16, 16)]
    return sorted({min(s, max_num_seqs) for s in sizes})


class CudaGraphRunner:
    def __init__(
        self, model: nn.Module, *, max_num_seqs: int, max_blocks: int, block_size: int, device: torch.device
    ) -> None:
        self.model = model
        self.block_size = block_size
        self.buckets = _buckets(max_num_seqs)
        n = self.buckets[-1]
        self.max_blocks = max_blocks
        # Inputs travel in two host-to-device copies from pinned staging buffers (one per dtype):
        #   longs [3, n]: token_ids | positions | slot_mapping
        #   ints  [n + n * max_blocks]: context_lens | block_tables rows
        # Two staging sets, used in turn: with asynchronous scheduling the previous step's copies
        # may not have run yet when this step is staged (the host has waited for the step before).
        pinned = torch.cuda.is_available()
        self.host_longs_sets = [torch.zeros(3, n, dtype=torch.long, pin_memory=pinned) for _ in range(2)]
        self.host_ints_sets = [
            torch.zeros(n * (1 + max_blocks), dtype=torch.int32, pin_memory=pinned) for _ in range(2)
        ]
        self.num_staged = 0
        self.longs = torch.zeros(3, n, dtype=torch.long, device=device)
        self.ints = torch.zeros(n * (1 + max_blocks), dtype=torch.int32, device=device)
        self.token_ids, self.positions, self.slot_mapping = self.longs[0], self.longs[1], self.longs[2]
        self.slot_mapping.fill_(-1)
        self.context_lens = self.ints[:n]
        self.block_tables = self.ints[n:].view(n, max_blocks)
        self.query_starts = torch.arange(n + 1, dtype=torch.int32, device=device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}
        self.pool: Any = None  # torch's private pool handle type

    def fits(self, num_seqs: int) -> bool:
        return num_seqs <= self.buckets[-1]

    def run(
        self,
        token_ids: list[int],
        positions: list[int],
        slots: list[int],
        block_tables: list[list[int]],
        pending: tuple[list[int], torch.Tensor, list[int]] | None = None,
    ) -> torch.Tensor:
        """logits: [n, vocab] float32 for n decode rows (a view into the bucket's graph output).

        pending = (rows, tokens, sources): token_ids[rows[j]] = tokens[sources[j]] on the device.
        """
        bucket = self.stage(token_ids, positions, slots, block_tables)
        if pending is not None:
            scatter_rows(self.token_ids, *pending)
        if bucket not in self.graphs:
            self._capture(bucket)
        self.graphs[bucket].replay()
        return self.logits[bucket][: len(token_ids)]

    def stage(
        self,
        token_ids: list[int],
        positions: list[int],
        slots: list[int],
        block_tables: list[list[int]],
    ) -> int:
        """Copy one step's inputs into the static buffers; returns the bucket to replay."""
        n = len(token_ids)
        bucket = next(b for b in self.buckets if b >= n)
        size, width = self.buckets[-1], self.max_blocks
        host_longs = self.host_longs_sets[self.num_staged % 2]
        host_ints = self.host_ints_sets[self.num_staged % 2]
        self.num_staged += 1
        longs, ints = host_longs.numpy(), host_ints.numpy()
        longs[0, :n], longs[1, :n], longs[2, :n] = token_ids, positions, slots
        longs[2, n:bucket] = -1
        ints[:n] = [p + 1 for p in positions]
        ints[n:bucket] = 0
        for i, table in enumerate(block_tables):
            row = size + i * width
            ints[row : row + len(table)] = table
        self.longs.copy_(host_longs, non_blocking=True)
        used = size + n * width
        self.ints[:used].copy_(host_ints[:used], non_blocking=True)
        return bucket

    def _meta(self, bucket: int) -> AttentionMetadata:
        return AttentionMetadata(
            slot_mapping=self.slot_mapping[:bucket],
            block_tables=self.block_tables[:bucket],
            context_lens=self.context_lens[:bucket],
            query_starts=self.query_starts[: bucket + 1],
            block_size=self.block_size,
            host_query_starts=tuple(range(bucket + 1)),
            host_context_lens=(1,) * bucket,
        )

    def _forward(self, bucket: int) -> torch.Tensor:
        hidden = self.model(self.token_ids[:bucket], self.positions[:bucket], self._meta(bucket))
        logits: torch.Tensor = self.model.compute_logits(hidden)  # type: ignore[operator]
        return logits

    def _capture(self, bucket: int) -> None:
        # A first eager run compiles the Triton kernels; capture then records launches only.
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._forward(bucket)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.logits[bucket] = self._forward(bucket)
        self.pool = graph.pool()
        self.graphs[bucket] = graph
