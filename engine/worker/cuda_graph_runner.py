"""Decode steps as replayed CUDA graphs: one graph per batch-size bucket, per hosted model.

A decode step of ``n`` sequences (one new token each) is padded to the smallest bucket ``>= n``
and replayed from static input buffers, so hundreds of small launches cost one::

    static buffers [bucket]      real rows [0, n)            padding rows [n, bucket)
    token_ids, positions         this step's tokens          0
    slot_mapping                 where each new K/V goes     -1  (the KV write skips it)
    context_lens                 start + 1                   0   (attention writes zeros)
    block_tables [bucket, W]     each sequence's blocks      stale, never read

A graph records the model's fused step (``engine.fused_step``). Everything a captured kernel's
grid depends on is fixed by the bucket (see
``engine.attention_backends.triton_backend.num_splits_for``), never by context lengths. Graphs share one
memory pool. ``capture_all`` records every bucket at start-up, largest first (the smaller ones
reuse its pool), so no step of a running workload pays for a capture or a Triton compile; a
bucket that could not be captured then (out of memory) is captured the first time a step needs it.

Greedy buckets (up to ``CudaTuning.greedy_tail_max_bucket`` rows) end with ``engine.kernels.step_advance``: the
graph also computes each row's greedy token, writes it into ``token_ids`` and a ring slot, and
moves positions, slots and context lengths one token on. When the next step is those rows one
position on, with the greedy tokens as their inputs and no new block needed, nothing is copied
or scattered before the replay; the host reads the tokens from the ring on a copy stream of their
own. Each greedy bucket has two graphs, one per ring slot, replayed in turn: a slot is written
again only after the copy that read it (the replay waits for it, long done by then).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from engine.attention_backends.metadata import AttentionMetadata
from engine.tuning import DEFAULT_TUNING, CudaTuning
from engine.worker.device_transfer import copy_stream, scatter_rows

if TYPE_CHECKING:
    from engine.fused_step import FusedStep

__all__ = ["CudaGraphRunner"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Captured:
    graph: torch.cuda.CUDAGraph
    logits: torch.Tensor
    """[bucket, vocab] float32: the graph's output."""


@dataclass(slots=True)
class _Advanced:
    """What the static inputs hold after a greedy graph's replay: its rows, one position on."""

    tables: list[list[int]]
    """The rows' block id lists (the same objects the scheduler grows)."""
    lengths: list[int]
    """How many ids of each list the device's table holds."""
    positions: list[int]
    """The positions that replay computed."""
    parity: int
    """The ring slot holding its tokens."""


def _buckets(max_num_seqs: int) -> list[int]:
    sizes = [1, 2, 4, 8, *range(16, max_num_seqs + 16, 16)]
    return sorted({min(s, max_num_seqs) for s in sizes})


class CudaGraphRunner:
    def __init__(
        self,
        step: FusedStep,
        *,
        max_num_seqs: int,
        max_blocks: int,
        block_size: int,
        device: torch.device,
        tuning: CudaTuning = DEFAULT_TUNING,
    ) -> None:
        self.step = step
        self.tuning = tuning
        self.block_size = block_size
        self.buckets = _buckets(max_num_seqs)
        n = self.buckets[-1]
        self.max_blocks = max_blocks
        # Inputs travel in one host-to-device copy from a pinned staging buffer of two parts:
        #   longs [3, n] int64: token_ids | positions | slot_mapping
        #   ints  [n + n * max_blocks] int32: context_lens | block_tables rows (as many as used)
        # Two staging sets, used in turn: with asynchronous scheduling the previous step's copy
        # may not have run yet when this step is staged (the host has waited for the step before).
        pinned = torch.cuda.is_available()
        self.longs_bytes = 3 * n * 8
        num_bytes = self.longs_bytes + n * (1 + max_blocks) * 4
        self.host_sets = [torch.zeros(num_bytes, dtype=torch.uint8, pin_memory=pinned) for _ in range(2)]
        self.num_staged = 0
        self._tables: dict[int, tuple[list[int], np.ndarray, int]] = {}
        """id(block_ids list) -> (that list, its ids as int32, how many are filled in): a running
        sequence's table only grows in place, so each step copies its new ids, not all of them."""
        self.staged = torch.zeros(num_bytes, dtype=torch.uint8, device=device)
        self.longs, self.ints = self._parts(self.staged, n)
        self.token_ids, self.positions, self.slot_mapping = self.longs[0], self.longs[1], self.longs[2]
        self.slot_mapping.fill_(-1)
        self.context_lens = self.ints[:n]
        self.block_tables = self.ints[n:].view(n, max_blocks)
        self.query_starts = torch.arange(n + 1, dtype=torch.int32, device=device)
        self.graphs: dict[int, list[Captured]] = {}
        """bucket -> its graph, or a greedy bucket's two (one per ring slot)."""
        self.pool: Any = None  # torch's private pool handle type
        self.device = device
        self.ring = torch.zeros(2, n, dtype=torch.long, device=device)
        """Greedy graphs' tokens, one slot per graph of a pair: the host copies from here."""
        self.counts = torch.zeros(n, dtype=torch.int32, device=device)
        """step_advance's per-row counters (zero between replays)."""
        self.greedy: torch.Tensor | None = None
        """After ``run``: [n] int64, the greedy tokens of the rows it ran, if its graph made them."""
        self.num_device_steps = 0
        """Steps whose inputs the previous replay had already written (nothing copied in)."""
        self._parity = 0
        self._ring_free: list[torch.cuda.Event | None] = [None, None]
        self._advanced: _Advanced | None = None

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
        Sets ``greedy`` (the rows' greedy tokens, from a greedy bucket's graph, else None).
        """
        n = len(token_ids)
        bucket = self._bucket(n)
        if bucket not in self.graphs:
            # The warm-up run writes through the inputs: padding rows, so no sequence's cache.
            self.slot_mapping.fill_(-1)
            self.context_lens.zero_()
            self._advanced = None
            self._capture(bucket)
        captured = self.graphs[bucket]
        last = self._advanced
        if (
            len(captured) == 2
            and last is not None
            and self._continues(last, positions, block_tables, pending)
        ):
            self.num_device_steps += 1
            lengths = last.lengths
        else:
            self.stage(token_ids, positions, slots, block_tables)
            if pending is not None:
                scatter_rows(self.token_ids, *pending)
            lengths = [len(t) for t in block_tables]
        if len(captured) == 1:
            self._advanced, self.greedy = None, None
            captured[0].graph.replay()
            return captured[0].logits[:n]
        parity = self._parity
        if self.device.type == "cuda":  # (tests drive the bookkeeping on the CPU)
            free = self._ring_free[parity]
            if free is not None:  # the copy that read this slot two replays ago
                torch.cuda.current_stream(self.device).wait_event(free)
            self._ring_free[1 - parity] = copy_stream(self.device).record_event()
        captured[parity].graph.replay()
        self._parity ^= 1
        self._advanced = _Advanced(list(block_tables), lengths, list(positions), parity)
        self.greedy = self.ring[parity, :n]
        return captured[parity].logits[:n]

    def _continues(
        self,
        last: _Advanced,
        positions: list[int],
        block_tables: list[list[int]],
        pending: tuple[list[int], torch.Tensor, list[int]] | None,
    ) -> bool:
        """Whether the static inputs already hold this step: the last greedy replay's rows, one
        position on, each reading the token that replay wrote, within the blocks it was given."""
        if pending is None or len(positions) != len(last.positions):
            return False
        rows, tokens, sources = pending
        n = len(positions)
        if rows != sources or rows != list(range(n)):
            return False
        ring = self.ring[last.parity]
        if tokens.data_ptr() != ring.data_ptr() or tokens.shape != (n,):
            return False
        bs = self.block_size
        return all(
            table is old and len(table) == length and p == old_p + 1 and p // bs < length
            for table, old, length, p, old_p in zip(
                block_tables, last.tables, last.lengths, positions, last.positions, strict=True
            )
        )

    def stage(
        self,
        token_ids: list[int],
        positions: list[int],
        slots: list[int],
        block_tables: list[list[int]],
    ) -> int:
        """Copy one step's inputs into the static buffers; returns the bucket to replay."""
        n = len(token_ids)
        bucket = self._bucket(n)
        size, width = self.buckets[-1], self.max_blocks
        host = self.host_sets[self.num_staged % 2]
        self.num_staged += 1
        host_longs, host_ints = self._parts(host, size)
        longs, ints = host_longs.numpy(), host_ints.numpy()
        longs[0, :n], longs[1, :n], longs[2, :n] = token_ids, positions, slots
        longs[2, n:bucket] = -1
        ints[:n] = [p + 1 for p in positions]
        ints[n:bucket] = 0
        tables: dict[int, tuple[list[int], np.ndarray, int]] = {}
        for i, table in enumerate(block_tables):
            row = size + i * width
            ints[row : row + len(table)] = self._table_array(table, tables)
        self._tables = tables  # tables of sequences not in this step are dropped
        used = self.longs_bytes + (size + n * width) * 4
        self.staged[:used].copy_(host[:used], non_blocking=True)
        return bucket

    def _bucket(self, n: int) -> int:
        return next(b for b in self.buckets if b >= n)

    def _parts(self, buffer: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        # The staging layout's typed views: (longs [3, n], ints).
        return buffer[: self.longs_bytes].view(torch.long).view(3, n), buffer[self.longs_bytes :].view(
            torch.int32
        )

    def _table_array(
        self, table: list[int], seen: dict[int, tuple[list[int], np.ndarray, int]]
    ) -> np.ndarray:
        """table as int32, reusing last step's conversion when it is the same list, grown.

        The entry holds the list itself, so its id cannot be reused by another list meanwhile; a
        list that shrank (the KV manager never shrinks one in place) is converted afresh.
        """
        entry = self._tables.get(id(table))
        if entry is not None and entry[0] is table and entry[2] <= len(table):
            _, array, filled = entry
        else:
            array, filled = np.empty(self.max_blocks, dtype=np.int32), 0
        n = len(table)
        if n > filled:
            array[filled:n] = table[filled:n]
        seen[id(table)] = (table, array, n)
        return array[:n]

    def capture_all(self) -> float:
        """Capture every bucket now, largest first; returns the seconds it took.

        The static inputs hold padding (no KV write, zero-length contexts), so capturing touches
        no sequence's cache. Out of device memory, the remaining buckets stay lazy.
        """
        start = time.perf_counter()
        for bucket in sorted(self.buckets, reverse=True):
            if bucket in self.graphs:
                continue
            try:
                self._capture(bucket)
            except torch.OutOfMemoryError:
                log.warning("CUDA graph capture stopped at bucket %d: out of device memory", bucket)
                torch.cuda.empty_cache()
                break
        torch.cuda.synchronize()
        return time.perf_counter() - start

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

    def _forward(self, bucket: int, parity: int | None, *, warm_up: bool = False) -> torch.Tensor:
        hidden = self.step.forward(self.token_ids[:bucket], self.positions[:bucket], self._meta(bucket))
        logits = self.step.logits(hidden)
        if parity is not None:
            from engine.kernels.step_advance import step_advance

            # The warm-up runs eagerly, maybe while a ring slot holds tokens still to be read
            # (pending, or being copied back): its own tokens go elsewhere.
            out = torch.empty_like(self.ring[0, :bucket]) if warm_up else self.ring[parity, :bucket]
            step_advance(
                logits, self.counts[:bucket], self.token_ids[:bucket], out,
                self.positions[:bucket], self.context_lens[:bucket], self.slot_mapping[:bucket],
                self.block_tables[:bucket], self.block_size, tuning=self.tuning,
            )  # fmt: skip
        return logits

    def _capture(self, bucket: int) -> None:
        parities: tuple[int | None, ...] = (0, 1) if bucket <= self.tuning.greedy_tail_max_bucket else (None,)
        # A first eager run compiles the Triton kernels; capture then records launches only.
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._forward(bucket, parities[0], warm_up=True)
        torch.cuda.current_stream().wait_stream(stream)
        captured = []
        for parity in parities:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                logits = self._forward(bucket, parity)
            self.pool = graph.pool()
            captured.append(Captured(graph, logits))
        self.graphs[bucket] = captured
