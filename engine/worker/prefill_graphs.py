"""One sequence's prefill (or extend) step as a replayed CUDA graph, by token-count bucket.

Run eagerly, a short prompt's prefill is launch-bound: hundreds of kernels, each costing more
Python time on the host than the GPU spends on it. A request arriving alone (the first token of
an interactive request) replays one graph instead, from static inputs padded to the smallest
bucket that holds its new tokens::

    static buffers [bucket]     tokens [0, n)              padding [n, bucket)
    token_ids, positions        the new tokens             0
    slot_mapping                where their K/V goes       -1  (the KV write skips it)
    query_starts                [0, n]: attention computes the n real rows only
    context_lens, block_tables  the sequence's (earlier context included: an extend)
    last                        n - 1: the row whose logits the graph returns

The attention grid depends only on the bucket (``num_q_tiles`` from the bucket's length; tiles
past ``n`` return at once). Padding rows run through the GEMMs and norms, row by row, and are
never read. Steps with several sequences, or more tokens than the largest bucket, stay eager.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import torch

from engine.attention_backends.metadata import AttentionMetadata

if TYPE_CHECKING:
    from engine.fused_step import FusedStep

__all__ = ["PrefillGraphs"]

log = logging.getLogger(__name__)

BUCKETS = (16, 32, 64, 128, 256, 512, 1024)
"""New-token counts captured; a prompt longer than the last is prefilled eagerly (where the
arithmetic, not the launches, takes the time)."""


class PrefillGraphs:
    def __init__(
        self, step: FusedStep, *, max_blocks: int, block_size: int, device: torch.device, max_tokens: int
    ) -> None:
        self.step = step
        self.block_size = block_size
        self.max_blocks = max_blocks
        self.buckets = tuple(b for b in BUCKETS if b <= max_tokens) or (BUCKETS[0],)
        n = self.buckets[-1]
        # Staged in one host-to-device copy: longs [4, n] token_ids | positions | slots | last,
        # ints [3 + max_blocks] context_len | query_starts (2) | block table. Two pinned staging
        # sets used in turn, as the decode graphs do (an earlier copy may still be queued).
        self._longs_bytes = 4 * n * 8
        num_bytes = self._longs_bytes + (3 + max_blocks) * 4
        pinned = torch.cuda.is_available()
        self._host = [torch.zeros(num_bytes, dtype=torch.uint8, pin_memory=pinned) for _ in range(2)]
        self._copied: list[torch.cuda.Event | None] = [None, None]
        """Per staging set, its last copy to the device: a step that replays several prefills
        (``ModelRunner``'s split steps) may come back to a set before that copy has run."""
        self._num_staged = 0
        self._staged = torch.zeros(num_bytes, dtype=torch.uint8, device=device)
        longs, ints = self._parts(self._staged)
        self.token_ids, self.positions, self.slot_mapping = longs[0], longs[1], longs[2]
        self.last = longs[3, :1]
        self.slot_mapping.fill_(-1)
        self.context_lens = ints[0:1]
        self.query_starts = ints[1:3]
        self.block_tables = ints[3:].view(1, max_blocks)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        """bucket -> (graph, its [1, vocab] float32 logits)."""
        self.pool: Any = None
        self.num_replays = 0

    @property
    def max_tokens(self) -> int:
        return self.buckets[-1]

    def _parts(self, buffer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = self.buckets[-1]
        return buffer[: self._longs_bytes].view(torch.long).view(4, n), buffer[self._longs_bytes :].view(
            torch.int32
        )

    def _bucket(self, n: int) -> int:
        return next(b for b in self.buckets if b >= n)

    def run(self, token_ids: list[int], start: int, block_ids: list[int]) -> torch.Tensor:
        """logits [1, vocab] float32 of the last of ``token_ids``, the new tokens at positions
        ``start ..``, whose K/V go into the sequence's ``block_ids`` (which already hold its
        first ``start`` tokens). The graph's own output: the next replay may overwrite it."""
        n = len(token_ids)
        bucket = self._bucket(n)
        if bucket not in self.graphs:
            self._capture(bucket)
        index = self._num_staged % 2
        host = self._host[index]
        self._num_staged += 1
        copied = self._copied[index]
        if copied is not None:
            copied.synchronize()  # its last copy has read it (long since, but for several a step)
        longs, ints = (t.numpy() for t in self._parts(host))
        bs = self.block_size
        end = start + n
        longs[0, :n] = token_ids
        longs[0, n:bucket] = 0
        longs[1, :n] = range(start, end)
        longs[1, n:bucket] = 0
        longs[2, :n] = [block_ids[p // bs] * bs + p % bs for p in range(start, end)]
        longs[2, n:bucket] = -1
        longs[3, 0] = n - 1
        ints[0], ints[1], ints[2] = end, 0, n
        ints[3 : 3 + len(block_ids)] = block_ids
        self._staged.copy_(host, non_blocking=True)
        if self._staged.is_cuda:
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record()
            self._copied[index] = event
        graph, logits = self.graphs[bucket]
        graph.replay()
        self.num_replays += 1
        return logits

    def capture_all(self) -> float:
        """Capture every bucket, largest first (the smaller ones reuse its pool); returns seconds.

        The static inputs hold padding while capturing (no KV write, a zero-length query)."""
        start = time.perf_counter()
        for bucket in sorted(self.buckets, reverse=True):
            try:
                self._capture(bucket)
            except torch.OutOfMemoryError:
                log.warning("prefill graph capture stopped at bucket %d: out of device memory", bucket)
                torch.cuda.empty_cache()
                break
        torch.cuda.synchronize()
        return time.perf_counter() - start

    def _forward(self, bucket: int) -> torch.Tensor:
        meta = AttentionMetadata(
            slot_mapping=self.slot_mapping[:bucket],
            block_tables=self.block_tables,
            context_lens=self.context_lens,
            query_starts=self.query_starts,
            block_size=self.block_size,
            host_query_starts=(0, bucket),
            host_context_lens=(bucket,),
        )
        hidden = self.step.forward(self.token_ids[:bucket], self.positions[:bucket], meta)
        return self.step.logits(hidden, lambda h: h.index_select(0, self.last))

    def _capture(self, bucket: int) -> None:
        if bucket in self.graphs:
            return
        self.slot_mapping.fill_(-1)
        self.query_starts.zero_()
        self.context_lens.zero_()
        self.last.zero_()
        # A first eager run compiles the Triton kernels; capture then records launches only.
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._forward(bucket)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            logits = self._forward(bucket)
        self.pool = graph.pool()
        self.graphs[bucket] = (graph, logits)
